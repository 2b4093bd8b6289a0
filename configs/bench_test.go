package configs_test

import (
	"math/rand"
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

// The shape scan alone (configs/shape*.go), on the example file and on
// 2,000 random lines of YAML's pieces (quoted and block scalars, flow
// collections, tags, anchors, comments):
//
//	go test ./configs -run '^$' -bench 'ShapeScan' -benchmem -count 6
func BenchmarkShapeScan(b *testing.B) {
	example, err := os.ReadFile("snip-jobs.example.yaml")
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		data []byte
	}{
		{"example", example},
		{"yamlish", []byte(yamlish(rand.New(rand.NewSource(3)), 2000))},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.data)))
			b.ReportAllocs()
			for b.Loop() {
				configs.ShapeOf(c.data)
			}
		})
	}
}
