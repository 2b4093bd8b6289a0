// Command release builds a snip-jobs release from the commit checked out, in
// one command: the binary (reproducible: -trimpath, stripped, without cgo,
// stamped with the version, the commit and the commit's date; relbuild) and
// the Debian package around it (debpkg), into a folder.
//
//	go run ./deploy/release                  # dist/snip-jobs and dist/snip-jobs_<version>_<arch>.deb
//	go run ./deploy/release -out /tmp/rel    # elsewhere
//
// It refuses a tree with changes not committed (-allow-modified builds one
// anyway, stamped "+dirty", for trying things out), and builds for the
// machine it runs on (linux/amd64 or linux/arm64): the package's man page is
// read from the built binary's own help. It prints each file's size and
// SHA-256, which a second build of the same commit reproduces.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	"github.com/snip/snip-jobs/deploy/release/debpkg"
	"github.com/snip/snip-jobs/deploy/release/relbuild"
)

func main() {
	out := flag.String("out", "dist", "the folder to write the binary and the package to")
	allowModified := flag.Bool("allow-modified", false, `build a tree with changes not committed (stamped "+dirty"): not a release`)
	maintainer := flag.String("maintainer", "", `the package's Maintainer field, "Name <address>" (default: the commit's author)`)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *out, *maintainer, *allowModified); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out, maintainer string, allowModified bool) error {
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	root, err := relbuild.ModuleRoot(wd)
	if err != nil {
		return err
	}
	if out, err = filepath.Abs(out); err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	if maintainer == "" {
		if maintainer, err = relbuild.Author(ctx, root); err != nil {
			return err
		}
	}
	began := time.Now()
	bin := filepath.Join(out, "snip-jobs")
	stamp, err := relbuild.Build(ctx, relbuild.Options{Dir: root, Out: bin, AllowModified: allowModified})
	if err != nil {
		return err
	}
	if err := checkVersion(ctx, bin, stamp); err != nil {
		return err
	}
	if err := report(bin, time.Since(began)); err != nil {
		return err
	}
	began = time.Now()
	deb, err := debpkg.Package(ctx, debpkg.Spec{Source: root, Binary: bin, Version: stamp.Version,
		Commit: stamp.Commit, Date: stamp.Date, Maintainer: maintainer, OutDir: out})
	if err != nil {
		return err
	}
	return report(deb, time.Since(began))
}

// checkVersion: the binary says the stamp it was given.
func checkVersion(ctx context.Context, bin string, s relbuild.Stamp) error {
	got, err := exec.CommandContext(ctx, bin, "version").Output()
	if err != nil {
		return fmt.Errorf("%s version: %w", bin, err)
	}
	if first, _, _ := strings.Cut(string(got), "\n"); first != "snip-jobs "+s.Version {
		return fmt.Errorf("%s version says %q, want the stamp %q", bin, first, s.Version)
	}
	return nil
}

// report prints a file's path, size, SHA-256 and how long it took to make.
func report(path string, took time.Duration) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return err
	}
	fmt.Printf("%s  %.1f MB  sha256 %s  (%v)\n", path, float64(n)/1e6, hex.EncodeToString(h.Sum(nil)), took.Round(100*time.Millisecond))
	return nil
}
