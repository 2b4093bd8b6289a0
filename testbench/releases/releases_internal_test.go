package releases

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/snip/snip-jobs/testbench/gobuild"
)

// The previous release is the parent of the commit that added the newest
// migration; in a shallow clone, where that parent is missing, Previous
// fails and says how to fetch the history (so the rolling-upgrade test fails
// rather than skips).
func TestThePreviousIsFoundInTheHistoryAndMissingFromAShallowClone(t *testing.T) {
	ctx := context.Background()
	root, err := gobuild.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	commit, err := previous(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("git", "-C", root, "diff", "--name-only", "--diff-filter=A", commit, "HEAD", "--", "migrations/").CombinedOutput()
	if err != nil || !strings.Contains(string(out), ".sql") {
		t.Errorf("no migration added since %s (%v): %s", commit, err, out)
	}

	shallow := t.TempDir()
	if out, err := exec.Command("git", "clone", "--quiet", "--depth", "1", "file://"+root, shallow).CombinedOutput(); err != nil {
		t.Fatalf("git clone --depth 1: %v\n%s", err, out)
	}
	_, err = previous(ctx, shallow)
	if err == nil || !strings.Contains(err.Error(), "git fetch --unshallow") {
		t.Fatalf("in a shallow clone: %v; want an error saying to fetch the history", err)
	}
	t.Log(err)
}
