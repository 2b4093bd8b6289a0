package pgcluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/snip/snip-jobs/testbench/flock"
)

// A cluster's folder goes in memory (tmpfs) when the machine has room there.
// On ext4, creating a file where many were recently deleted costs a scan of
// the inode table (the kernel's recently_deleted), and a test run creates and
// deletes tens of thousands (a database copied from a template is ~300
// files): forty such databases cost 6 to 10 s of the server's CPU on ext4 and
// under 3 s in tmpfs. The data is throwaway either way (fsync is off).
const (
	memoryRoot = "/dev/shm"
	// memoryNeed is the room a tmpfs must have for clusters to go there:
	// tests run several clusters at once, each up to a few hundred MB.
	memoryNeed = 4 << 30
	tmpfsMagic = 0x01021994
)

// clusterDir is a cluster's folder and, for one in memory, the claim that
// keeps other processes from sweeping it.
type clusterDir struct {
	path  string
	claim func() // nil for a folder on disk
}

// release removes the folder and gives up its claim.
func (d clusterDir) release() error {
	err := os.RemoveAll(d.path)
	if d.claim != nil {
		os.Remove(d.path + ".lock")
		d.claim()
	}
	return err
}

// makeClusterDir creates the cluster's folder, owned by the server's user:
// in memory when there is room (see memoryRoot), else in the temporary
// directory. It holds the unix socket, so its path must stay well under the
// 107 bytes of a socket address; and when the server runs as another user,
// every folder above it must be searchable by that user (t.TempDir's are not:
// 0700).
func makeClusterDir(ctx context.Context, prefix string, cred *syscall.Credential) (clusterDir, error) {
	var tried []string
	if inMemory(memoryRoot, memoryNeed) {
		d, err := makeMemoryDir(ctx, memoryRoot, prefix, cred)
		if err == nil {
			return d, nil
		}
		tried = append(tried, err.Error())
	}
	for _, parent := range []string{os.TempDir(), "/tmp"} {
		if len(parent) > 60 {
			tried = append(tried, parent+" (too long for a unix socket path)")
			continue
		}
		if cred != nil {
			if err := searchableBy(parent, cred); err != nil {
				tried = append(tried, err.Error())
				continue
			}
		}
		dir, err := newDir(parent, prefix, cred)
		return clusterDir{path: dir}, err
	}
	return clusterDir{}, fmt.Errorf("no folder for the cluster: %s", strings.Join(tried, "; "))
}

// makeMemoryDir creates the folder under root (memoryRoot), in a parent of this
// user's own, and claims it with a lock file beside it (flock: the claim goes
// with this process however it ends). Folders whose claim has gone, left by a
// process that died before Destroy, are swept first: in memory they would
// hold RAM until the next boot.
func makeMemoryDir(ctx context.Context, root, prefix string, cred *syscall.Credential) (clusterDir, error) {
	parent := filepath.Join(root, fmt.Sprintf("snip-jobs-pg-%d", os.Geteuid()))
	if err := os.Mkdir(parent, 0o755); err != nil && !os.IsExist(err) {
		return clusterDir{}, err
	}
	if err := ownedOnlyByMe(parent); err != nil {
		return clusterDir{}, err
	}
	// Sweeping and claiming happen under one lock, so a sweep never finds a
	// folder whose claim is not yet taken.
	unlock, err := flock.Lock(ctx, filepath.Join(parent, ".lock"))
	if err != nil {
		return clusterDir{}, err
	}
	defer unlock()
	sweep(parent)
	dir, err := newDir(parent, prefix, cred)
	if err != nil {
		return clusterDir{}, err
	}
	claim, err := flock.Lock(ctx, dir+".lock")
	if err != nil {
		os.RemoveAll(dir)
		return clusterDir{}, err
	}
	return clusterDir{path: dir, claim: claim}, nil
}

// sweep removes the folders in parent whose claim no process holds.
func sweep(parent string) {
	locks, _ := filepath.Glob(filepath.Join(parent, "*.lock"))
	for _, lock := range locks {
		unlock, ok, err := flock.TryLock(lock)
		if err != nil || !ok {
			continue
		}
		os.RemoveAll(strings.TrimSuffix(lock, ".lock"))
		os.Remove(lock)
		unlock()
	}
}

// newDir creates a new folder in parent for the server's user.
func newDir(parent, prefix string, cred *syscall.Credential) (string, error) {
	dir, err := os.MkdirTemp(parent, prefix)
	if err != nil {
		return "", err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			os.RemoveAll(dir)
			return "", err
		}
	}
	return dir, nil
}

// inMemory reports whether path is on a tmpfs with at least need bytes free.
func inMemory(path string, need uint64) bool {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return false
	}
	return st.Type == tmpfsMagic && st.Bavail*uint64(st.Bsize) >= need
}

// ownedOnlyByMe checks that dir is a real folder of this user that no one
// else may write to: it sits in a world-writable root, where another user
// could have made it first.
func ownedOnlyByMe(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || st.Uid != uint32(os.Geteuid()) || fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%s is not a folder of uid %d that only it may write to (mode %v)", dir, os.Geteuid(), fi.Mode())
	}
	return nil
}

// searchableBy reports whether user cred can traverse dir and every folder
// above it. Supplementary groups are ignored: the server runs without them.
func searchableBy(dir string, cred *syscall.Credential) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	for {
		fi, err := os.Stat(dir)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		mode := fi.Mode().Perm()
		switch {
		case !ok:
		case st.Uid == cred.Uid && mode&0o100 != 0:
		case st.Uid != cred.Uid && st.Gid == cred.Gid && mode&0o010 != 0:
		case st.Uid != cred.Uid && st.Gid != cred.Gid && mode&0o001 != 0:
		default:
			return fmt.Errorf("%s (mode %v) is not searchable by uid %d", dir, mode, cred.Uid)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return nil
		}
		dir = parent
	}
}
