package gobuild_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/snip/snip-jobs/testbench/gobuild"
)

// A program built in a throwaway module lands at Bin only after its check
// passed; Cached then accepts it, and refuses a missing file or one whose
// check fails.
func TestBuildInstallsACheckedBinaryThatCachedThenAccepts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bin := filepath.Join(t.TempDir(), "hello", "hello")
	files := map[string]string{
		"go.mod":  "module hello\n\ngo 1.24\n",
		"main.go": "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hello v1\") }\n",
	}
	steps := [][]string{{"build", "-o", "OUT", "."}}
	if gobuild.Cached(ctx, bin, nil) {
		t.Fatal("Cached accepts a binary that does not exist")
	}
	err := gobuild.Build{Bin: bin, Files: files, Steps: steps, Check: gobuild.VersionSays("hello v2")}.Run(ctx)
	if err == nil {
		t.Fatal("a binary failing its check was installed without an error")
	}
	if _, err := os.Stat(bin); !os.IsNotExist(err) {
		t.Fatalf("a binary failing its check is at %s (stat: %v)", bin, err)
	}
	if err := (gobuild.Build{Bin: bin, Files: files, Steps: steps, Check: gobuild.VersionSays("hello v1")}).Run(ctx); err != nil {
		t.Fatal(err)
	}
	if !gobuild.Cached(ctx, bin, gobuild.VersionSays("hello v1")) {
		t.Error("Cached refuses the binary just built")
	}
	if gobuild.Cached(ctx, bin, gobuild.VersionSays("hello v2")) {
		t.Error("Cached accepts a binary whose check fails")
	}
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(bin), "*.build-*"))
	if len(left) != 0 {
		t.Errorf("work folders left behind: %v", left)
	}
}

// Shared links a package once: built again unchanged, the binary is the same
// file (the link was skipped; go build only touches it); after a source change, it is the new
// program, in a new file (renamed into place: a process running the old one
// keeps it).
func TestSharedLinksOnceAndAgainOnlyAfterAChange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	write := func(greeting string) {
		t.Helper()
		for name, content := range map[string]string{
			"go.mod":  "module hello\n\ngo 1.24\n",
			"main.go": "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"" + greeting + "\") }\n",
		} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	build := func() (string, os.FileInfo) {
		t.Helper()
		bin, err := gobuild.Shared(ctx, dir, "hello")
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(bin)
		if err != nil {
			t.Fatal(err)
		}
		return bin, fi
	}
	write("hello v1")
	bin, first := build()
	t.Cleanup(func() { os.RemoveAll(filepath.Dir(bin)) })
	if err := gobuild.VersionSays("hello v1")(ctx, bin); err != nil {
		t.Fatal(err)
	}
	if _, again := build(); !os.SameFile(first, again) {
		t.Error("built again unchanged, the binary was linked again (a new file)")
	}
	write("hello v2")
	if _, changed := build(); os.SameFile(first, changed) {
		t.Error("after a source change, the binary is the same file")
	}
	if err := gobuild.VersionSays("hello v2")(ctx, bin); err != nil {
		t.Error(err)
	}
}
