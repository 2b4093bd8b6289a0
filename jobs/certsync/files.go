package certsync

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"

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
func (j *Job) sync(ctx context.Context, log *slog.Logger) (files map[string]string, changed bool, err error) {
	dir := j.opts.Dir
	onDisk, err := j.prepare(log)
	if err != nil {
		j.m.errors.WithLabelValues("dir").Inc()
		log.ErrorContext(ctx, "certsync: the directory cannot be used; nothing was written", "err", err)
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
		wrote, err := j.put(domain, crt, onDisk[domain])
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
	removed, err := j.removeStale(ctx, log, onDisk, want, files)
	if err != nil {
		errs = append(errs, err)
	}
	if changed || removed {
		if err := syncDir(dir); err != nil {
			errs = append(errs, err)
		}
	}
	j.m.files.Set(float64(len(files)))
	return files, changed || removed, errors.Join(errs...)
}

// prepare makes sure the directory and the job's subdirectory exist,
// removes temporary files a crash left, and lists the certificate files.
func (j *Job) prepare(log *slog.Logger) (onDisk map[string]bool, err error) {
	dir := j.opts.Dir
	if err := j.mkdir(dir, 0o750); err != nil {
		return nil, err
	}
	work := filepath.Join(dir, workDir)
	if err := j.mkdir(work, 0o700); err != nil {
		return nil, err
	}
	leftovers, err := filepath.Glob(filepath.Join(work, tempPattern))
	if err != nil {
		return nil, err
	}
	for _, f := range leftovers {
		if err := os.Remove(f); err != nil {
			return nil, fmt.Errorf("certsync: remove a temporary file left by a crash: %w", err)
		}
		log.Info("certsync: removed a temporary file left by a crash", "file", f)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("certsync: read the directory: %w", err)
	}
	onDisk = map[string]bool{}
	for _, e := range entries {
		if d, ok := strings.CutSuffix(e.Name(), fileSuffix); ok && e.Type().IsRegular() && SafeName(d) {
			onDisk[d] = true
		}
	}
	return onDisk, nil
}

// mkdir makes dir with mode (and the group) unless it exists; an existing
// one must be a directory and is left as it is.
func (j *Job) mkdir(dir string, mode os.FileMode) error {
	fi, err := os.Stat(dir)
	switch {
	case err == nil && fi.IsDir():
		return nil
	case err == nil:
		return fmt.Errorf("certsync: %s is not a directory", dir)
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("certsync: directory: %w", err)
	}
	if err := os.Mkdir(dir, mode); err != nil {
		return fmt.Errorf("certsync: create the directory: %w", err)
	}
	if j.gid >= 0 && mode&0o070 != 0 {
		if err := os.Chown(dir, -1, j.gid); err != nil {
			return fmt.Errorf("certsync: directory group: %w", err)
		}
	}
	return os.Chmod(dir, mode) // whatever the umask
}

// put writes domain's file unless it already holds crt with the right
// mode. wrote says whether the file changed.
func (j *Job) put(domain string, crt *certserve.Certificate, exists bool) (wrote bool, err error) {
	path := filepath.Join(j.opts.Dir, FileName(domain))
	if exists && j.written[domain] == crt.ID {
		return false, nil
	}
	content := fileContent(crt)
	if exists {
		if same, err := j.holds(path, content); err != nil {
			return false, err
		} else if same {
			return false, nil
		}
	}
	if err := j.owe(); err != nil {
		return false, err
	}
	return true, j.writeAtomic(path, content)
}

// fileContent is the chain, leaf first, then the private key: what nginx's
// ssl_certificate and ssl_certificate_key and HAProxy's crt all read.
func fileContent(crt *certserve.Certificate) []byte {
	b := bytes.TrimRight(crt.ChainPEM, "\n")
	out := make([]byte, 0, len(b)+1+len(crt.KeyPEM))
	out = append(append(out, b...), '\n')
	return append(out, crt.KeyPEM...)
}

// holds reports whether path has exactly content; if so, it also sets the
// file's mode and group, should they differ (the group option changed).
func (j *Job) holds(path string, content []byte) (bool, error) {
	old, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(old, content) {
		return false, nil // rewritten, which reports any real problem
	}
	fi, err := os.Stat(path)
	if err != nil {
		return false, nil
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && j.gid >= 0 && int(st.Gid) != j.gid {
		if err := os.Chown(path, -1, j.gid); err != nil {
			return false, fmt.Errorf("certsync: set the group: %w", err)
		}
	}
	if fi.Mode().Perm() != j.fileMode() {
		if err := os.Chmod(path, j.fileMode()); err != nil {
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

// writeAtomic replaces path with content: a temporary file, private until
// its mode and group are set, written, fsynced, then renamed over path. On
// any error the temporary file is removed and path is untouched.
func (j *Job) writeAtomic(path string, content []byte) (err error) {
	f, err := os.CreateTemp(filepath.Join(j.opts.Dir, workDir), tempPattern) // mode 0600
	if err != nil {
		return fmt.Errorf("certsync: write %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
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
	return os.Rename(tmp, path)
}

// removeStale removes the files of domains without a current certificate.
// A domain missing from memory but still current in PostgreSQL (its key
// does not open here, or its notification has not arrived) keeps its file.
func (j *Job) removeStale(ctx context.Context, log *slog.Logger, onDisk map[string]bool, want map[string]*certserve.Certificate, files map[string]string) (removed bool, err error) {
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
		path := filepath.Join(j.opts.Dir, FileName(d))
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
		if err := j.owe(); err != nil {
			errs = append(errs, err)
			break
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			j.m.errors.WithLabelValues("remove").Inc()
			log.ErrorContext(ctx, "certsync: cannot remove a file whose certificate is no longer current; retrying", "domain", d, "err", err)
			errs = append(errs, fmt.Errorf("certsync: remove: %w", err))
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

// syncDir makes the renames in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("certsync: fsync the directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("certsync: fsync the directory %s: %w", dir, err)
	}
	return nil
}
