// Package debpkg makes the snip-jobs Debian package from a release binary
// and a source tree, with nfpm (github.com/goreleaser/nfpm/v2) as a library:
//
//	/usr/bin/snip-jobs                                  the binary
//	/usr/lib/systemd/system/snip-jobs.service           deploy/systemd, unchanged
//	/usr/lib/systemd/system/snip-jobs-challenge.socket  deploy/systemd, unchanged
//	/etc/snip-jobs/snip-jobs.yaml.example               configs/snip-jobs.example.yaml, a conffile
//	/usr/share/man/man1/snip-jobs.1.gz                  from the binary's own --help (helpdoc)
//	/usr/share/bash-completion/completions/snip-jobs    from the same help
//	/usr/share/doc/snip-jobs/copyright                  the licences of everything the binary links
//	/usr/share/doc/snip-jobs/changelog.gz        one entry: the commit
//
// and the maintainer scripts of deploy/debian (postinst, prerm, postrm).
//
// What is guaranteed: the package is a function of its inputs (the binary,
// the tree's files, the version and date given, the module cache's licence
// files): every time in it is the date given (the commit's), the files are in
// a fixed order and compressed without timestamps, so one commit packaged
// twice is the same bytes. No file of the package is the operator's: the
// config the service reads (/etc/snip-jobs/snip-jobs.yaml) is never shipped,
// so no upgrade touches it.
//
// A build tool: the snip-jobs binary must not import it.
package debpkg

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/goreleaser/nfpm/v2"
	"github.com/goreleaser/nfpm/v2/deb"
	"github.com/goreleaser/nfpm/v2/files"

	"github.com/snip/snip-jobs/deploy/release/helpdoc"
)

// Name is the package's name.
const Name = "snip-jobs"

// Spec is what to package.
type Spec struct {
	Source     string    // the snip-jobs tree the units, the example config and the scripts come from
	Binary     string    // the snip-jobs binary (for the host's architecture: its help is read)
	Version    string    // the binary's Go module version (relbuild.Stamp.Version)
	Commit     string    // for the changelog
	Date       time.Time // the commit's: every time in the package
	Maintainer string    // "Name <address>"
	OutDir     string
}

// description is the control file's: a synopsis, then paragraphs.
const description = `Snip's background jobs, each singleton on one server at a time
snip-jobs runs Snip's background jobs on its servers: every job on every
server, or, for a singleton, on exactly one server at a time (the holder of
the job's term in etcd or on a Kubernetes Lease), with its PostgreSQL writes
fenced by the term's token.

The service does not start until /etc/snip-jobs/snip-jobs.yaml exists:
write it from snip-jobs.yaml.example beside it, check it with
'snip-jobs validate', then 'systemctl start snip-jobs'.`

// Package writes the package into OutDir and returns its path.
func Package(ctx context.Context, s Spec) (string, error) {
	work, err := os.MkdirTemp("", "snip-jobs-deb-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	generated, err := generate(ctx, s, work)
	if err != nil {
		return "", err
	}
	info := &nfpm.Info{
		Name: Name, Arch: runtime.GOARCH, Platform: "linux",
		Version: DebianVersion(s.Version), VersionSchema: "none",
		Section: "admin", Priority: "optional", Maintainer: s.Maintainer,
		Description: description, Homepage: "https://github.com/snip/snip-jobs",
		MTime: s.Date,
		Overridables: nfpm.Overridables{
			Contents: contents(s, generated),
			Scripts: nfpm.Scripts{
				PostInstall: filepath.Join(s.Source, "deploy/debian/postinst"),
				PreRemove:   filepath.Join(s.Source, "deploy/debian/prerm"),
				PostRemove:  filepath.Join(s.Source, "deploy/debian/postrm"),
			},
			// xz, dpkg-deb's own default, which every dpkg reads (zstd
			// took 3 s instead of 10 here, but needs dpkg 1.21.18).
			Deb: nfpm.Deb{Compression: "xz"},
		},
	}
	if err := nfpm.PrepareForPackager(nfpm.WithDefaults(info), "deb"); err != nil {
		return "", fmt.Errorf("package contents: %w", err)
	}
	path := filepath.Join(s.OutDir, deb.Default.ConventionalFileName(info))
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	if err := deb.Default.Package(info, f); err != nil {
		f.Close()
		return "", fmt.Errorf("package %s: %w", path, err)
	}
	return path, f.Close()
}

// contents lists the package's files (sources on disk) with their modes.
func contents(s Spec, generated map[string]string) files.Contents {
	src := func(rel string) string { return filepath.Join(s.Source, rel) }
	list := []struct {
		dst, src, typ string
		mode          os.FileMode
	}{
		{"/usr/bin/snip-jobs", s.Binary, files.TypeFile, 0o755},
		{"/usr/lib/systemd/system/snip-jobs.service", src("deploy/systemd/snip-jobs.service"), files.TypeFile, 0o644},
		{"/usr/lib/systemd/system/snip-jobs-challenge.socket", src("deploy/systemd/snip-jobs-challenge.socket"), files.TypeFile, 0o644},
		{"/etc/snip-jobs", "", files.TypeDir, 0o755},
		{"/etc/snip-jobs/snip-jobs.yaml.example", src("configs/snip-jobs.example.yaml"), files.TypeConfig, 0o644},
	}
	for dst, path := range generated {
		list = append(list, struct {
			dst, src, typ string
			mode          os.FileMode
		}{dst, path, files.TypeFile, 0o644})
	}
	var cs files.Contents
	for _, f := range list {
		cs = append(cs, &files.Content{Source: f.src, Destination: f.dst, Type: f.typ,
			FileInfo: &files.ContentFileInfo{Mode: f.mode, MTime: s.Date}})
	}
	return cs
}

// generate writes the files made from the binary and the tree into work,
// and returns their places in the package → their paths.
func generate(ctx context.Context, s Spec, work string) (map[string]string, error) {
	doc, err := helpdoc.Read(ctx, s.Binary)
	if err != nil {
		return nil, err
	}
	notices, err := copyright(ctx, s.Source, s.Binary)
	if err != nil {
		return nil, err
	}
	man, err := gzipped(doc.Man(s.Version, s.Date))
	if err != nil {
		return nil, err
	}
	changes, err := gzipped(changelog(s))
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{
		"/usr/share/man/man1/snip-jobs.1.gz":               man,
		"/usr/share/bash-completion/completions/snip-jobs": doc.BashCompletion(s.Version),
		"/usr/share/doc/snip-jobs/copyright":               notices,
		"/usr/share/doc/snip-jobs/changelog.gz":            changes,
	}
	paths := map[string]string{}
	for dst, data := range out {
		path := filepath.Join(work, filepath.Base(dst))
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return nil, err
		}
		paths[dst] = path
	}
	return paths, nil
}

// changelog is the package's changelog (a native package's: its version
// has no Debian revision): one entry, the commit.
func changelog(s Spec) []byte {
	return fmt.Appendf(nil, "%s (%s) unstable; urgency=medium\n\n  * Built from commit %.12s of github.com/snip/snip-jobs.\n\n -- %s  %s\n",
		Name, DebianVersion(s.Version), s.Commit, s.Maintainer, s.Date.UTC().Format(time.RFC1123Z))
}

// gzipped compresses data as Debian wants (gzip -9n): the most compression,
// no name and no time in the header.
func gzipped(data []byte) ([]byte, error) {
	var b bytes.Buffer
	w, err := gzip.NewWriterLevel(&b, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(data); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// DebianVersion is a Go module version as a Debian version that sorts as Go
// sorts them: "v" dropped; the first "-" (a pre-release, or the
// pseudo-version of a commit after a release) becomes "~", which sorts
// before the release it precedes, and the others ".":
// v0.0.0-20261207143250-93ef996abcde → 0.0.0~20261207143250.93ef996abcde,
// v1.2.4-0.20261207143250-93ef996abcde → 1.2.4~0.20261207143250.93ef996abcde.
// "+dirty" is kept: it sorts after the same version without.
func DebianVersion(goVersion string) string {
	v := strings.TrimPrefix(goVersion, "v")
	v = strings.Replace(v, "-", "~", 1)
	return strings.ReplaceAll(v, "-", ".")
}
