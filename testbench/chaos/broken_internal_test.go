package chaos

import (
	"context"
	"os"
	"testing"
)

// The broken build is linked once per checkout: a second run, its overlay in
// a folder of its own, finds the binary up to date (the same file; go build
// only touches it) instead of linking it again into a new file.
func TestTheBrokenBuildIsLinkedOnceForEveryRun(t *testing.T) {
	t.Parallel()
	build := func(broken bool) (string, os.FileInfo) {
		t.Helper()
		bin, err := buildBinary(context.Background(), t.TempDir(), broken)
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(bin)
		if err != nil {
			t.Fatal(err)
		}
		return bin, fi
	}
	first, before := build(true)
	second, after := build(true)
	if second != first || !os.SameFile(before, after) {
		t.Errorf("the second run's broken build is %s, a new file: want %s, the same file (go build only touches an up-to-date binary)",
			second, first)
	}
	if normal, _ := build(false); normal == first {
		t.Errorf("the normal build is %s, the broken one's file: want a binary apart", normal)
	}
}
