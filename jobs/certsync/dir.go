package certsync

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// exportDir is the directory kept in sync and the job's work folder in it,
// each opened once per pass without following a link and checked (owner,
// mode) before anything is read, written or removed; every operation of the
// pass is then relative to their descriptors (openat, renameat, unlinkat),
// so a link planted in place of either, or swapped in during the pass, is
// never followed.
//
// Why not os.Root: it follows links inside the root (a .certsync pointing at
// another folder of the directory would be used), opens the root itself by
// following a link, and does not say who owns what it opened. The checks
// here are stricter: no link at all where the job writes or removes.
//
// The directory's ancestors are not checked (a sticky, world-writable /tmp
// above a private directory is fine): a link among them is the
// administrator's own path.
type exportDir struct {
	path string // the directory's path, for messages
	fd   int    // the directory
	work int    // its .certsync folder
}

// openExport creates (if missing), opens and checks the directory and its
// work folder. The error names the directory, what is wrong and the fix.
func (j *Job) openExport() (*exportDir, error) {
	path := j.opts.Dir
	parent, err := unix.Open(filepath.Dir(path), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("certsync: the directory %s: its parent: %w", path, err)
	}
	defer unix.Close(parent)
	fd, err := openPrivateDir(parent, filepath.Base(path), path, 0o750, j.gid)
	if err != nil {
		return nil, err
	}
	work, err := openPrivateDir(fd, workDir, filepath.Join(path, workDir), 0o700, -1)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &exportDir{path: path, fd: fd, work: work}, nil
}

func (d *exportDir) close() {
	unix.Close(d.work)
	unix.Close(d.fd)
}

// openPrivateDir opens name in parent as a directory, creating it with
// mode (and group gid, if the mode gives the group anything) when it is
// missing; it refuses a link, another file type, a directory owned by
// another user, or one its group or others may write in.
func openPrivateDir(parent int, name, path string, mode uint32, gid int) (int, error) {
	created := false
	switch err := unix.Mkdirat(parent, name, mode); {
	case err == nil:
		created = true
	case !errors.Is(err, unix.EEXIST):
		return -1, fmt.Errorf("certsync: create the directory %s: %w", path, err)
	}
	fd, err := unix.Openat(parent, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, notADirectory(parent, name, path, err)
	}
	if created {
		if gid >= 0 && mode&0o070 != 0 {
			if err := unix.Fchown(fd, -1, gid); err != nil {
				unix.Close(fd)
				return -1, fmt.Errorf("certsync: the group of the directory %s: %w", path, err)
			}
		}
		if err := unix.Fchmod(fd, mode); err != nil { // whatever the umask
			unix.Close(fd)
			return -1, fmt.Errorf("certsync: the mode of the directory %s: %w", path, err)
		}
	}
	if err := checkPrivate(fd, path); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// notADirectory explains why name could not be opened as a directory.
func notADirectory(parent int, name, path string, openErr error) error {
	var st unix.Stat_t
	if err := unix.Fstatat(parent, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("certsync: open the directory %s: %w", path, openErr)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		buf := make([]byte, 4096)
		to := "?"
		if n, err := unix.Readlinkat(parent, name, buf); err == nil {
			to = string(buf[:n])
		}
		if name == workDir {
			return fmt.Errorf("certsync: %s is a symbolic link (to %q), not the job's own folder: certsync follows no link in the directory, "+
				"and writes or removes nothing until it is gone; something other than this job made it: check who can write in %s, "+
				"then remove the link (rm %s; the job makes the folder again)", path, to, filepath.Dir(path), path)
		}
		return fmt.Errorf("certsync: the directory %s is a symbolic link (to %q), which certsync does not follow: "+
			"set dir to a real directory, owned by the service's user and writable by it alone", path, to)
	case unix.S_IFDIR:
		return fmt.Errorf("certsync: open the directory %s: %w", path, openErr)
	}
	return fmt.Errorf("certsync: %s is not a directory", path)
}

// checkPrivate refuses a directory that another user owns or that its
// group or others may write in: whoever can write in it can plant files
// and links that the TLS server reads or that certsync would act on.
func checkPrivate(fd int, path string) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("certsync: the directory %s: %w", path, err)
	}
	if uid := os.Geteuid(); int(st.Uid) != uid {
		return fmt.Errorf("certsync: the directory %s is owned by uid %d, not by the service's user (uid %d): its owner could replace the files "+
			"the TLS server reads; nothing is written until it is: chown %d %s", path, st.Uid, uid, uid, path)
	}
	if st.Mode&0o022 != 0 {
		who := "others"
		switch {
		case st.Mode&0o020 != 0 && st.Mode&0o002 != 0:
			who = "its group and others"
		case st.Mode&0o020 != 0:
			who = "its group"
		}
		return fmt.Errorf("certsync: the directory %s is writable by %s (mode %04o): they could plant files or links the TLS server reads; "+
			"nothing is written until it is writable by its owner alone: chmod go-w %s", path, who, st.Mode&0o7777, path)
	}
	return nil
}

// listDir lists the directory open as fd (DirEntry's Type only: its Info
// would go by path).
func listDir(fd int, path string) ([]fs.DirEntry, error) {
	d, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("certsync: read the directory %s: %w", path, err)
	}
	f := os.NewFile(uintptr(d), path)
	defer f.Close()
	es, err := f.ReadDir(-1)
	if err != nil {
		return nil, fmt.Errorf("certsync: read the directory %s: %w", path, err)
	}
	return es, nil
}

// createTemp creates a new temporary file in the work folder, mode 0600.
func (d *exportDir) createTemp() (f *os.File, name string, err error) {
	for range 100 {
		name = fmt.Sprintf("tmp-%016x", rand.Uint64())
		fd, err := unix.Openat(d.work, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		if err != nil {
			return nil, "", fmt.Errorf("create a temporary file in %s: %w", filepath.Join(d.path, workDir), err)
		}
		return os.NewFile(uintptr(fd), filepath.Join(d.path, workDir, name)), name, nil
	}
	return nil, "", fmt.Errorf("create a temporary file in %s: no free name", filepath.Join(d.path, workDir))
}

// sync makes the renames and removals in the directory durable.
func (d *exportDir) sync() error {
	if err := unix.Fsync(d.fd); err != nil {
		return fmt.Errorf("certsync: fsync the directory %s: %w", d.path, err)
	}
	return nil
}
