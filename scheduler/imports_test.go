package scheduler_test

import (
	"go/build"
	"strings"
	"testing"
)

// The scheduler speaks no etcd: leadership owns the protocol (its keys, the
// resign requests, the instances' registrations, the cluster's load), and
// the scheduler reaches it through the session alone. What
// `go list -f '{{join .Imports "\n"}}' ./scheduler` lists names no etcd package.
func TestTheSchedulerImportsNoEtcdPackage(t *testing.T) {
	t.Parallel()
	for dir, name := range map[string]string{".": "scheduler", "slots": "scheduler/slots"} {
		pkg, err := build.ImportDir(dir, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(pkg.Imports) == 0 {
			t.Fatalf("%s: no imports read", name)
		}
		for _, imp := range pkg.Imports {
			if strings.HasPrefix(imp, "go.etcd.io/") {
				t.Errorf("%s imports %s", name, imp)
			}
		}
	}
}
