package status_test

import (
	"go/build"
	"strings"
	"testing"
)

// The model reads the leadership backends only through a LeadershipReader
// (package clusterview has one for each): package status imports neither
// etcd's client nor package leadership nor kubelease.
func TestTheStatusModelImportsNoLeadershipBackend(t *testing.T) {
	t.Parallel()
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(pkg.Imports) == 0 {
		t.Fatal("no imports read")
	}
	for _, imp := range pkg.Imports {
		if strings.HasPrefix(imp, "go.etcd.io/") || strings.HasPrefix(imp, "github.com/snip/snip-jobs/leadership") {
			t.Errorf("scheduler/status imports %s", imp)
		}
	}
}
