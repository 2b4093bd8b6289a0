package certsync

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/snip/snip-jobs/jobs/certrenew/certserve"
)

// The directory's layout: <domain>.pem per domain, and the job's own
// subdirectory for temporary files and the reload marker. HAProxy's
// `crt <dir>` and a glob of *.pem skip a directory.
const (
	fileSuffix   = ".pem"
	workDir      = ".certsync"
	tempPattern  = "tmp-*"
	reloadMarker = "reload-pending"
)

// safeName is a domain the renewer can store that is also a safe file
// name: lower-case letters, digits and inner hyphens, in two or more
// labels; no '/', no leading dot, no "..".
var safeName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)+$`)

// SafeName reports whether domain may name a file in the directory.
func SafeName(domain string) bool { return len(domain) <= 253 && safeName.MatchString(domain) }

// FileName is the name of domain's file in the directory.
func FileName(domain string) string { return domain + fileSuffix }

// sync makes the directory match the certificates in memory. It returns
// the files it holds (domain → serial), whether it changed any, and every
// error, each naming its path.
func (j *Job) sync(ctx context.Context, log *slog.Logger, d *exportDir) (files map[string]string, changed bool, err error) {
	dir := j.opts.Dir
	onDisk, err := j.prepare(log, d)
	if err != nil {
		j.dirError(ctx, log, err)
		return nil, false, err
	}
	want := j.src.All()
	files = map[string]string{}
	var errs []error
	skipped := 0
	for _, domain := range slices.Sorted(maps.Keys(want)) {
		crt := want[domain]
		if !SafeName(domain) {
			skipped++
			j.refuseName(ctx, log, domain)
			continue
		}
		wrote, err := j.put(d, domain, crt, onDisk[domain])
		if err != nil {
			delete(j.written, domain)
			j.m.errors.WithLabelValues("write").Inc()
			log.ErrorContext(ctx, "certsync: cannot write a certificate file; the old one, if any, stays; retrying", "domain", domain, "err", err)
			errs = append(errs, err)
			continue
		}
		j.written[domain], files[domain] = crt.ID, crt.Serial
		if wrote {
			changed = true
			j.m.writes.Inc()
			log.InfoContext(ctx, "certsync: certificate file written", "domain", domain, "serial", crt.Serial,
				"not_after", crt.NotAfter, "file", filepath.Join(dir, FileName(domain)))
		}
	}
	j.m.skipped.Set(float64(skipped))
	removed, err := j.removeStale(ctx, log, d, onDisk, want, files)
	if err != nil {
		errs = append(errs, err)
	}
	if changed || removed {
		if err := d.sync(); err != nil {
			errs = append(errs, err)
		}
	}
	j.m.files.Set(float64(len(files)))
	return files, changed || removed, errors.Join(errs...)
}

// dirError reports a directory that cannot be used (see openExport).
func (j *Job) dirError(ctx context.Context, log *slog.Logger, err error) {
	j.m.errors.WithLabelValues("dir").Inc()
	log.ErrorContext(ctx, "certsync: the directory cannot be used; nothing was written", "err", err)
}

// prepare removes the temporary files a crash left in the work folder and
// lists the certificate files.
func (j *Job) prepare(log *slog.Logger, d *exportDir) (onDisk map[string]bool, err error) {
	work := filepath.Join(d.path, workDir)
	leftovers, err := listDir(d.work, work)
	if err != nil {
		return nil, err
	}
	for _, e := range leftovers {
		if ok, _ := filepath.Match(tempPattern, e.Name()); !ok {
			continue
		}
		f := filepath.Join(work, e.Name())
		if err := unix.Unlinkat(d.work, e.Name(), 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return nil, fmt.Errorf("certsync: remove a temporary file left by a crash, %s: %w", f, err)
		}
		log.Info("certsync: removed a temporary file left by a crash", "file", f)
	}
	entries, err := listDir(d.fd, d.path)
	if err != nil {
		return nil, err
	}
	onDisk = map[string]bool{}
	for _, e := range entries {
		if dom, ok := strings.CutSuffix(e.Name(), fileSuffix); ok && e.Type().IsRegular() && SafeName(dom) {
			onDisk[dom] = true
		}
	}
	return onDisk, nil
}

// put writes domain's file unless it already holds crt with the right
// mode. wrote says whether the file changed.
func (j *Job) put(d *exportDir, domain string, crt *certserve.Certificate, exists bool) (wrote bool, err error) {
	name := FileName(domain)
	if exists && j.written[domain] == crt.ID {
		return false, nil
	}
	content := fileContent(crt)
	if exists {
		if same, err := j.holds(d, name, content); err != nil {
			return false, err
		} else if same {
			return false, nil
		}
	}
	if err := j.owe(d); err != nil {
		return false, err
	}
	return true, j.writeAtomic(d, name, content)
}

// fileContent is the chain, leaf first, then the private key: what nginx's
// ssl_certificate and ssl_certificate_key and HAProxy's crt all read.
func fileContent(crt *certserve.Certificate) []byte {
	b := bytes.TrimRight(crt.ChainPEM, "\n")
	out := make([]byte, 0, len(b)+1+len(crt.KeyPEM))
	out = append(append(out, b...), '\n')
	return append(out, crt.KeyPEM...)
}

// holds reports whether the directory's file name has exactly content (a
// regular file, opened without following a link); if so, it also sets the
// file's mode and group, should they differ (the group option changed).
func (j *Job) holds(d *exportDir, name string, content []byte) (bool, error) {
	path := filepath.Join(d.path, name)
	fd, err := unix.Openat(d.fd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, nil // rewritten, which reports any real problem
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return false, nil
	}
	old, err := io.ReadAll(io.LimitReader(f, int64(len(content))+1))
	if err != nil || !bytes.Equal(old, content) {
		return false, nil
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && j.gid >= 0 && int(st.Gid) != j.gid {
		if err := f.Chown(-1, j.gid); err != nil {
			return false, fmt.Errorf("certsync: set the group: %w", err)
		}
	}
	if fi.Mode().Perm() != j.fileMode() {
		if err := f.Chmod(j.fileMode()); err != nil {
			return false, fmt.Errorf("certsync: set the mode: %w", err)
		}
	}
	return true, nil
}

func (j *Job) fileMode() os.FileMode {
	if j.gid >= 0 {
		return 0o640
	}
	return 0o600
}

// writeAtomic replaces the directory's file name with content: a
// temporary file in the work folder, private until its mode and group are
// set, written, fsynced, then renamed over name. On any error the
// temporary file is removed and the file is untouched.
func (j *Job) writeAtomic(d *exportDir, name string, content []byte) (err error) {
	path := filepath.Join(d.path, name)
	f, tmp, err := d.createTemp() // mode 0600
	if err != nil {
		return fmt.Errorf("certsync: write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			unix.Unlinkat(d.work, tmp, 0)
			err = fmt.Errorf("certsync: write %s: %w", path, err)
		}
	}()
	if j.gid >= 0 {
		if err := f.Chown(-1, j.gid); err != nil {
			return err
		}
	}
	if err := f.Chmod(j.fileMode()); err != nil {
		return err
	}
	if _, err := f.Write(content); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := unix.Renameat(d.work, tmp, d.fd, name); err != nil {
		return fmt.Errorf("rename %s over it: %w", f.Name(), err)
	}
	return nil
}

// removeStale removes the files of domains without a current certificate.
// A domain missing from memory but still current in PostgreSQL (its key
// does not open here, or its notification has not arrived) keeps its file.
func (j *Job) removeStale(ctx context.Context, log *slog.Logger, dir *exportDir, onDisk map[string]bool, want map[string]*certserve.Certificate, files map[string]string) (removed bool, err error) {
	var stale []string
	for d := range onDisk {
		if _, ok := want[d]; !ok {
			stale = append(stale, d)
		}
	}
	if len(stale) == 0 {
		return false, nil
	}
	current, err := j.stillCurrent(ctx, stale)
	if err != nil {
		j.m.errors.WithLabelValues("remove").Inc()
		return false, fmt.Errorf("certsync: cannot ask PostgreSQL which certificates are still current, so no file is removed: %w", err)
	}
	var errs []error
	var kept []string
	for _, d := range stale {
		path := filepath.Join(dir.path, FileName(d))
		if current[d] {
			files[d] = ""
			kept = append(kept, d)
			if !j.kept[d] {
				j.kept[d] = true
				log.WarnContext(ctx, "certsync: file kept: its domain has a current certificate in PostgreSQL that this job cannot serve (see the reader's log: its key does not open?)",
					"domain", d, "file", path)
			}
			continue
		}
		if err := j.owe(dir); err != nil {
			errs = append(errs, err)
			break
		}
		if err := unix.Unlinkat(dir.fd, FileName(d), 0); err != nil && !errors.Is(err, unix.ENOENT) {
			err = fmt.Errorf("certsync: remove %s: %w", path, err)
			j.m.errors.WithLabelValues("remove").Inc()
			log.ErrorContext(ctx, "certsync: cannot remove a file whose certificate is no longer current; retrying", "domain", d, "err", err)
			errs = append(errs, err)
			continue
		}
		delete(j.written, d)
		delete(j.kept, d)
		removed = true
		j.m.removals.Inc()
		log.InfoContext(ctx, "certsync: certificate file removed: its domain has no current certificate", "domain", d, "file", path)
	}
	if len(kept) > 0 {
		// Not in sync: retried (with back-off) until the reader serves them
		// or PostgreSQL no longer holds them.
		slices.Sort(kept)
		if len(kept) > 5 {
			kept = append(kept[:5], "…")
		}
		errs = append(errs, fmt.Errorf("certsync: file(s) kept but not served: their domains have a current certificate this job cannot open: %s",
			strings.Join(kept, ", ")))
	}
	return removed, errors.Join(errs...)
}

// stillCurrent asks PostgreSQL which of domains have a current
// certificate: a removal must not follow from what this reader could not
// open.
func (j *Job) stillCurrent(ctx context.Context, domains []string) (map[string]bool, error) {
	rows, err := j.pool.Query(ctx, `SELECT domain FROM certrenew_certificates WHERE current AND domain = ANY($1)`, domains)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	current := map[string]bool{}
	for rows.Next() {
		var d string
		if err := rows.Scan(&d); err != nil {
			return nil, err
		}
		current[d] = true
	}
	return current, rows.Err()
}

func (j *Job) refuseName(ctx context.Context, log *slog.Logger, domain string) {
	if j.badNames[domain] {
		return
	}
	j.badNames[domain] = true
	log.ErrorContext(ctx, "certsync: certificate skipped: its domain is not a safe file name", "domain", domain)
}
