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
	ctx := context.Background()
	first, err := buildBinary(ctx, t.TempDir(), true)
	if err != nil {
		t.Fatal(err)
	}
	before, err := os.Stat(first)
	if err != nil {
		t.Fatal(err)
	}
	second, err := buildBinary(ctx, t.TempDir(), true)
	if err != nil {
		t.Fatal(err)
	}
	after, err := os.Stat(second)
	if err != nil {
		t.Fatal(err)
	}
	if second != first || !os.SameFile(before, after) {
		t.Errorf("the second run's broken build is %s, a new file: want %s, the same file (go build only touches an up-to-date binary)",
			second, first)
	}
	if normal, err := buildBinary(ctx, t.TempDir(), false); err != nil || normal == first {
		t.Errorf("the normal build is %s (%v), want a binary apart from the broken one", normal, err)
	}
}
