package configs_test

import (
	"os"
	"testing"

	"github.com/snip/snip-jobs/configs"
)

// The ten-deep alias bomb of issue 17, refused at MaxAliasNodes, and the
// example file, for what an ordinary config costs (BENCHMARKS.md):
//
//	go test ./configs -run '^$' -bench 'Parse' -benchmem -count 5
func BenchmarkParseAliasBomb(b *testing.B) {
	data := aliasBomb(10)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := configs.Parse("bomb.yaml", data, fakeTypes{}); err == nil {
			b.Fatal("the bomb was accepted")
		}
	}
}

func BenchmarkParseExample(b *testing.B) {
	data, err := os.ReadFile("snip-jobs.example.yaml")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := configs.Parse("example.yaml", data, anyOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}
