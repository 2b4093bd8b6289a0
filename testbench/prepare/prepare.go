// Package prepare builds, once, what the test suite runs beside the code
// under test and would take too long to build inside a test: the tests'
// kube-apiserver, etcd's own server at the oldest supported release of each
// line, the previous release of snip-jobs (the rolling-upgrade test), the
// release build's packages compiled with its flags (the release and package
// tests), and the Debian root file system the systemd tests boot. Each lands in the user
// cache folder (~/.cache/snip-jobs) and is reused by every later run; a test
// that finds one missing builds it itself, under go test's per-package
// timeout, which a fresh machine's first builds can outlast.
//
// testbench/cmd/snip-test runs Steps and then `go test`: the README's test command.
// The package imports only the standard library and the light packages that
// know the recipes (kubebuild, releases, systemdtest, gobuild, relbuild), so that
// snip-test compiles in seconds on a fresh machine and these builds start at
// once, beside the compiling of the packages under test.
package prepare

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/snip/snip-jobs/app/etcdversion"
	"github.com/snip/snip-jobs/deploy/release/relbuild"
	"github.com/snip/snip-jobs/testbench/gobuild"
	"github.com/snip/snip-jobs/testbench/kubetest/kubebuild"
	"github.com/snip/snip-jobs/testbench/releases"
	"github.com/snip/snip-jobs/testbench/systemdtest"
)

// Step is one thing built into the cache.
type Step struct {
	Name string
	// First says what a first build costs, for the person waiting.
	First string
	// Build returns the path built or found in the cache ("" for work that
	// leaves no file of its own).
	Build func(ctx context.Context) (string, error)
	// Lane: the steps of one lane run one after another, in order; the
	// lanes run side by side. Two lanes of compiling keep both cores busy
	// through each build's single-threaded stretches (its link); a step that
	// waits on the network and the disk gets a lane of its own.
	Lane int
}

// The lanes of Steps. testbench/cmd/snip-test puts its compiling of the packages under
// test first in Releases.
const (
	KubeAPIServer = iota // the longest build, alone
	Releases             // etcd's releases, then the previous release
	Downloads            // the root file system, from deb.debian.org
)

// Steps are everything the suite needs built, each in its lane, in the
// order each lane builds them.
func Steps() []Step {
	var steps []Step
	for _, v := range kubebuild.Versions() {
		steps = append(steps, Step{
			Name:  "kube-apiserver " + v,
			First: "a first build: 9 to 11 minutes beside the other builds on two cores, 1.9 GiB of memory",
			Build: func(ctx context.Context) (string, error) { return kubebuild.Binary(ctx, v) },
			Lane:  KubeAPIServer,
		})
	}
	for _, m := range etcdversion.Minimum {
		v := fmt.Sprintf("%d.%d.%d", m[0], m[1], m[2])
		steps = append(steps, Step{
			Name:  "etcd " + v,
			First: "a first build: about a minute",
			Build: func(ctx context.Context) (string, error) { return releases.Etcd(ctx, v) },
			Lane:  Releases,
		})
	}
	steps = append(steps, Step{
		Name:  "the previous release of snip-jobs",
		First: "a first build: about 20 seconds",
		Lane:  Releases,
		Build: func(ctx context.Context) (string, error) {
			commit, err := releases.Previous(ctx)
			if err != nil {
				return "", err
			}
			return releases.SnipJobs(ctx, commit)
		},
	}, Step{
		// The release tests link release builds: their packages compiled
		// with the release's flags (-trimpath, no cgo), which share nothing
		// in the build cache with the tests' own builds.
		Name:  "the release build's packages (compiled)",
		First: "on an empty build cache: 2 to 5 minutes on two cores",
		Lane:  Releases,
		Build: func(ctx context.Context) (string, error) {
			root, err := gobuild.ModuleRoot()
			if err != nil {
				return "", err
			}
			return "", relbuild.Warm(ctx, root)
		},
	}, Step{
		Name:  "the systemd container's root file system",
		First: "debootstrap from deb.debian.org: 1 to 4 minutes, 245 MB",
		Lane:  Downloads,
		Build: func(ctx context.Context) (string, error) {
			cache, err := gobuild.CacheDir()
			if err != nil {
				return "", err
			}
			return systemdtest.Rootfs(ctx, cache)
		},
	})
	return steps
}

// slowStep is how long a step runs before Run says what a first build costs.
const slowStep = 10 * time.Second

// Run builds what steps need, lane by lane (Step.Lane). It reports each
// step on w as it ends, and returns every step's error.
func Run(ctx context.Context, w io.Writer, steps []Step) error {
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(w, format+"\n", args...)
	}
	errs := make([]error, len(steps))
	run := func(i int) {
		s := steps[i]
		began := time.Now()
		if s.First != "" {
			// Said only for a step still at work after a while: a build.
			slow := time.AfterFunc(slowStep, func() { say("  %-42s building (%s)…", s.Name, s.First) })
			defer slow.Stop()
		}
		path, err := s.Build(ctx)
		took := time.Since(began).Round(100 * time.Millisecond)
		switch {
		case err != nil:
			errs[i] = fmt.Errorf("%s: %w", s.Name, err)
			say("  %-42s FAILED after %v: %v", s.Name, took, err)
		case path == "":
			say("  %-42s done in %v", s.Name, took)
		case took > 2*time.Second:
			say("  %-42s built in %v: %s", s.Name, took, tidy(path))
		default:
			say("  %-42s ready: %s", s.Name, tidy(path))
		}
	}
	lanes := map[int][]int{}
	for i, s := range steps {
		lanes[s.Lane] = append(lanes[s.Lane], i)
	}
	var wg sync.WaitGroup
	for _, lane := range lanes {
		wg.Go(func() {
			for _, i := range lane {
				run(i)
			}
		})
	}
	wg.Wait()
	var failed []error
	for _, err := range errs {
		if err != nil {
			failed = append(failed, err)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d of %d steps failed: %v", len(failed), len(steps), failed)
	}
	return nil
}

// tidy shortens a path in the user's home folder.
func tidy(path string) string {
	if home, err := os.UserHomeDir(); err == nil {
		if rel, err := filepath.Rel(home, path); err == nil && !strings.HasPrefix(rel, "..") {
			return filepath.Join("~", rel)
		}
	}
	return path
}
