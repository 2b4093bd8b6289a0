package configs_test

import (
	"errors"
	"os"
	"runtime"
	"testing"

	"github.com/snip/snip-jobs/configs"
)

// fuzzAllocLimit bounds what one Parse may allocate beyond a multiple of its
// input: the ten-deep alias bomb, refused at the limit, allocates about 2 MB.
const fuzzAllocLimit = 64 << 20

// Whatever the input, Parse returns a File or problems that each have a line,
// never panics, and does bounded work: its aliases produce at most
// MaxAliasNodes nodes and it allocates at most fuzzAllocLimit (plus a
// multiple of the input's size). Both are measures of work, not of time, so
// they hold on any machine; the seeds include anchors inside options, where
// aliases are expanded.
//
//	go test ./configs -run '^$' -fuzz FuzzParse -fuzztime 5m
func FuzzParse(f *testing.F) {
	example, err := os.ReadFile("snip-jobs.example.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(example)
	f.Add(lines("jobs:", "  - &a {name: x, type: aggregator, continuous: true, options: {batch_size: 1}}", "  - {<<: *a, name: y}"))
	f.Add(lines("instance: [a", "etcd: *x"))
	f.Add(aliasBomb(3))
	f.Add(mergeBomb(3))
	f.Add(lines("jobs:", "  - name: a", "    type: certrenew", "    every: 1h",
		"    options: &o {email: &e a@b.c, domains: [*e, *e, {<<: *o}]}", "  - {name: b, type: certrenew, every: 1h, options: *o}"))
	f.Add(lines("jobs:", "  - name: a", "    type: aggregator", "    continuous: true",
		"    options:", "      <<: &m {batch_size: 5}", "      flush_every: &f 1s", "      x: [*m, *f, *m]"))
	f.Add(lines("d: &d {batch_size: 1.5}", "jobs: [{name: a, type: aggregator, continuous: true, options: {<<: [*d, *d]}}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		file, nodes, err := configs.ParseCounting("fuzz.yaml", data, fakeTypes{})
		runtime.ReadMemStats(&after)
		if nodes > configs.MaxAliasNodes+len(data) {
			t.Errorf("aliases and merge keys produced %d nodes, over the limit of %d", nodes, configs.MaxAliasNodes)
		}
		if limit := fuzzAllocLimit + 4096*uint64(len(data)); after.TotalAlloc-before.TotalAlloc > limit {
			t.Errorf("Parse allocated %d MB for %d bytes of input, over %d MB", (after.TotalAlloc-before.TotalAlloc)>>20, len(data), limit>>20)
		}
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
