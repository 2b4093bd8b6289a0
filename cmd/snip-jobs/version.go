package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
)

func versionCommand() command {
	return command{
		name:    "version",
		summary: "print this binary's version, commit and date, and its Go and library versions",
		about: `Prints the version of this binary, the commit it was built from and that
commit's date, the Go version, and the versions of the libraries that talk to
the outside: etcd's client, client-go, lego and pgx.

A release build (go run ./deploy/release) stamps the version (a release tag,
or a Go pseudo-version naming the commit), the commit and its date into the
binary; a release is dated by its commit, never by the clock, so that two builds
of one commit are the same bytes. Other builds say what the Go toolchain
recorded: the module version ("(devel)" from a work tree) and, when it could
read one, the VCS revision and its time.`,
		flags: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			return func(_ context.Context, args []string) error {
				if len(args) > 0 {
					return usageError("usage: version takes no arguments")
				}
				readBuildInfo().print(c.stdout)
				return nil
			}
		},
	}
}

// Set by the release build with -ldflags -X (deploy/release/relbuild):
// link-time constants, the only way to stamp a binary with what the Go
// toolchain cannot record (it reads no VCS in a git worktree, nor with
// -buildvcs=false). Empty in every other build.
var (
	stampVersion string // a tag or pseudo-version, "+dirty" when built with uncommitted changes
	stampCommit  string // the commit's full hash
	stampDate    string // the commit's date, RFC 3339 UTC
)

// dependencyVersions are the libraries `version` names, in its order.
var dependencyVersions = []struct{ label, module string }{
	{"etcd client", "go.etcd.io/etcd/client/v3"},
	{"client-go", "k8s.io/client-go"},
	{"lego", "github.com/go-acme/lego/v5"},
	{"pgx", "github.com/jackc/pgx/v5"},
}

// buildInfo is what the binary knows about its own build.
type buildInfo struct {
	Version   string // the stamp's, else the module version ("(devel)" from a work tree)
	Revision  string // commit hash, "" if not recorded
	Time      string // the commit's date
	Modified  bool   // built from a work tree with uncommitted changes
	Stamped   bool   // by the release build
	GoVersion string
	Deps      map[string]string // module path → version (a replacement's, if replaced)
}

func readBuildInfo() buildInfo {
	b := buildInfo{Version: "(unknown)", GoVersion: runtime.Version(), Deps: map[string]string{}}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v := bi.Main.Version; v != "" {
			b.Version = v
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Revision = s.Value
			case "vcs.time":
				b.Time = s.Value
			case "vcs.modified":
				b.Modified = s.Value == "true"
			}
		}
		for _, d := range bi.Deps {
			if d.Replace != nil {
				d = d.Replace
			}
			b.Deps[d.Path] = d.Version
		}
	}
	if stampVersion != "" {
		b.Version, b.Revision, b.Time, b.Stamped = stampVersion, stampCommit, stampDate, true
		b.Modified = strings.HasSuffix(stampVersion, "+dirty")
	}
	return b
}

// print writes what `version` prints: the version, then one "label  value"
// line each for the commit, its date, Go and the dependencies.
func (b buildInfo) print(w io.Writer) {
	fmt.Fprintf(w, "snip-jobs %s\n", b.Version)
	line := func(label, value string) { fmt.Fprintf(w, "%-12s %s\n", label, value) }
	switch {
	case b.Revision == "":
		line("commit", "not recorded (a release build stamps it: go run ./deploy/release)")
	case b.Modified:
		line("commit", b.Revision+" with changes not committed")
	default:
		line("commit", b.Revision)
	}
	if b.Time != "" {
		line("date", b.Time+" (the commit's)")
	}
	line("go", b.GoVersion+" "+runtime.GOOS+"/"+runtime.GOARCH)
	for _, d := range dependencyVersions {
		v := b.Deps[d.module]
		if v == "" {
			v = "not recorded"
		}
		line(d.label, d.module+" "+v)
	}
}

// versionString is the one line logs carry, e.g. "snip-jobs v1.2.0
// (revision 0123456789ab, 2026-01-02T03:04:05Z) go1.26.0 linux/amd64".
func versionString() string {
	b := readBuildInfo()
	var vcs []string
	if b.Revision != "" {
		rev := b.Revision
		if len(rev) > 12 {
			rev = rev[:12]
		}
		vcs = append(vcs, "revision "+rev)
		if b.Time != "" {
			vcs = append(vcs, b.Time)
		}
		if b.Modified {
			vcs = append(vcs, "modified")
		}
	}
	s := "snip-jobs " + b.Version
	if len(vcs) > 0 {
		s += " (" + strings.Join(vcs, ", ") + ")"
	}
	return s + " " + b.GoVersion + " " + runtime.GOOS + "/" + runtime.GOARCH
}
