package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The layout's promises, checked on what the Go toolchain links: the
// binary carries nothing of the test bench (its kits, Pebble, the fault
// harness, the dev cluster) nor of the release tooling (deploy/release and
// its packager, nfpm), and the floors below the wiring link no
// leadership backend's client (etcd's, Kubernetes') — they reach terms
// through package leadership's backend-free API.
func TestTheBinaryLinksNothingOfTheTestBench(t *testing.T) {
	t.Parallel()
	for _, dep := range deps(t, "github.com/snip/snip-jobs/cmd/snip-jobs") {
		for _, bench := range []string{"github.com/snip/snip-jobs/testbench/", "github.com/letsencrypt/", "github.com/chromedp/",
			"github.com/snip/snip-jobs/deploy/", "github.com/goreleaser/"} {
			if strings.HasPrefix(dep, bench) {
				t.Errorf("snip-jobs links %s", dep)
			}
		}
	}
}

func TestTheFloorsBelowTheWiringLinkNoLeadershipBackend(t *testing.T) {
	t.Parallel()
	for _, floor := range []string{"configs", "scheduler", "jobs"} {
		for _, dep := range deps(t, "github.com/snip/snip-jobs/"+floor+"/...") {
			if strings.HasPrefix(dep, "go.etcd.io/") || strings.HasPrefix(dep, "k8s.io/") {
				t.Errorf("%s/... links %s", floor, dep)
			}
		}
	}
}

// deps lists the packages pkgs link, test files left out.
func deps(t *testing.T, pkgs ...string) []string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list", "-deps", "-test=false"}, pkgs...)...).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("go list -deps %v: %v\n%s", pkgs, err, stderr)
	}
	return strings.Fields(string(out))
}
