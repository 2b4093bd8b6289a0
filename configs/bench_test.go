package configs_test

import (
	"bytes"
	"os"
	"strings"
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

// hostileFiles are what the guard before the YAML library refuses, and the
// example file it lets through (BENCHMARKS.md, "The hostile-config guard"):
//
//	go test ./configs -run '^$' -bench 'Guard' -benchmem -count 3
func hostileFiles(b *testing.B) []struct {
	name string
	data []byte
} {
	example, err := os.ReadFile("snip-jobs.example.yaml")
	if err != nil {
		b.Fatal(err)
	}
	job := "jobs:\n  - name: deep\n    type: weeklyreport\n    every: 1h\n    options:\n      title: "
	return []struct {
		name string
		data []byte
	}{
		{"example", example},
		{"brackets-20k", []byte(job + strings.Repeat("[", 20_000) + strings.Repeat("]", 20_000) + "\n")},
		{"brackets-200k", []byte(job + strings.Repeat("[", 200_000) + strings.Repeat("]", 200_000) + "\n")},
		{"block-lists-20k", []byte("x:\n" + strings.Repeat("- ", 20_000) + "1\n")},
		{"keys-and-lists-20k", []byte(strings.Repeat("k:\n-\n", 10_000))},
		{"nodes-10k", bytes.Repeat([]byte("- a\n"), 10_000)},
		{"long-key", []byte(strings.Repeat("k", 500_000) + ": [" + strings.Repeat("a,", 4_500) + "a]\n")},
		{"runs-of-lt", []byte("x: " + strings.Repeat("<", 50_000) + "\n")},
		{"comment-lines-1MiB", bytes.Repeat([]byte("#\n"), 1<<19)},
		{"flow-40k-words", []byte("x: [" + strings.Repeat("a,", 20_000) + "a]\n")},
		{"alias-bomb", aliasBomb(10)},
	}
}

// The guard alone, and Parse (the guard, then the library for what passes
// it: the example and the alias bomb).
func BenchmarkGuard(b *testing.B) {
	for _, c := range hostileFiles(b) {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				configs.Guard(c.data)
			}
		})
	}
}

func BenchmarkGuardParse(b *testing.B) {
	files := hostileFiles(b)
	// Refused before the guard, by size: 52 MB, and a 10 MB scalar.
	files = append(files, struct {
		name string
		data []byte
	}{"52MB", bytes.Repeat([]byte("# "+strings.Repeat("x", 98)+"\n"), 52<<20/101)},
		struct {
			name string
			data []byte
		}{"scalar-10MB", []byte("x: " + strings.Repeat("a", 10<<20) + "\n")})
	for _, c := range files {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				configs.Parse("hostile.yaml", c.data, anyOptions{})
			}
		})
	}
}
