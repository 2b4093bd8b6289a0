package configs_test

import (
	"errors"
	"os"
	"testing"

	"github.com/snip/snip-jobs/configs"
)

// Whatever the input, Parse returns a File or problems that each have a line, and
// never panics.
func FuzzParse(f *testing.F) {
	example, err := os.ReadFile("snip-jobs.example.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(example)
	f.Add(lines("jobs:", "  - &a {name: x, type: aggregator, continuous: true, options: {batch_size: 1}}", "  - {<<: *a, name: y}"))
	f.Add(lines("instance: [a", "etcd: *x"))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := configs.Parse("fuzz.yaml", data, fakeTypes{})
		if err == nil {
			if file == nil {
				t.Fatal("no File and no error")
			}
			return
		}
		var errs configs.Errors
		if !errors.As(err, &errs) || len(errs) == 0 {
			t.Fatalf("error is not a non-empty Errors: %#v", err)
		}
		for _, e := range errs {
			if e.Pos.Line <= 0 || e.Pos.File != "fuzz.yaml" {
				t.Errorf("problem without a position: %s", e)
			}
		}
	})
}
