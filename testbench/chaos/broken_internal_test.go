package chaos

import (
	"context"
	"os"
	"testing"
)

// The broken build is linked once per checkout: a second run, its overlay in
// a folder of its own, finds the binary up to date (the same file; go build
// only touches it) instead of linking it again into a new file. Each broken
// variant is a binary of its own.
func TestTheBrokenBuildIsLinkedOnceForEveryRun(t *testing.T) {
	t.Parallel()
	build := func(o Options) (string, os.FileInfo) {
		t.Helper()
		bin, err := buildBinary(context.Background(), t.TempDir(), o)
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(bin)
		if err != nil {
			t.Fatal(err)
		}
		return bin, fi
	}
	first, before := build(Options{Broken: true})
	second, after := build(Options{Broken: true})
	if second != first || !os.SameFile(before, after) {
		t.Errorf("the second run's broken build is %s, a new file: want %s, the same file (go build only touches an up-to-date binary)",
			second, first)
	}
	if normal, _ := build(Options{}); normal == first {
		t.Errorf("the normal build is %s, the broken one's file: want a binary apart", normal)
	}
	if manual, _ := build(Options{BrokenManual: true}); manual == first {
		t.Errorf("the broken manual build is %s, the broken one's file: want a binary apart", manual)
	}
}
