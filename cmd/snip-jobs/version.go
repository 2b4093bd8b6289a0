package main

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

func versionCommand() command {
	return command{
		name:    "version",
		summary: "print the version of this binary",
		about: `Prints the module version of this binary (a release tag when installed with
'go install ...@version', "(devel)" when built from a work tree), the VCS
revision it was built from when the build recorded one, and the Go version.`,
		flags: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			return func(_ context.Context, args []string) error {
				if len(args) > 0 {
					return usageError("usage: version takes no arguments")
				}
				fmt.Fprintln(c.stdout, versionString())
				return nil
			}
		},
	}
}

// buildInfo is what the binary knows about its own build.
type buildInfo struct {
	Version   string // module version, "(devel)" from a work tree
	Revision  string // VCS revision, "" if not recorded
	Time      string // VCS commit time
	Modified  bool   // built from a work tree with uncommitted changes
	GoVersion string
}

func readBuildInfo() buildInfo {
	b := buildInfo{Version: "(unknown)", GoVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
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
	return b
}

// versionString is e.g. "snip-jobs v1.2.0 (revision 0123456789ab, 2026-01-02T03:04:05Z) go1.26.0 linux/amd64".
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
