// Package unreadable keeps files from the processes a thread starts. Restrict
// makes the calling OS thread, and every process it forks from then on,
// unable to open the given paths (or anything beneath them) for reading:
// Linux's Landlock, unprivileged, inherited across fork and exec, and never
// lifted.
//
// Landlock only grants, so Restrict grants reading everywhere but the
// hidden paths: every entry of each directory on the way to one, except
// that way itself. Its limits:
//   - only reading is refused: a hidden file can still be listed, stat'ed,
//     executed, or written if its mode allows;
//   - a hard link to a hidden file elsewhere is another path, and readable;
//   - an entry created after Restrict in a directory on the way to a hidden
//     path (say a new file in /run) is unreadable too: it was not there to
//     be granted. Entries of the directories it granted are not affected;
//   - the thread also gets no_new_privs (Landlock's condition for an
//     unprivileged process): a set-user-ID program started from it runs
//     without gaining its owner's rights;
//   - Landlock needs Linux 5.13 or later with landlock among its LSMs, and a
//     seccomp filter (systemd's SystemCallFilter=) that lets its three
//     system calls through. Available says whether it is there.
package unreadable

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ErrUnavailable is Available's error when this kernel has no Landlock.
var ErrUnavailable = errors.New("no Landlock here (it needs Linux 5.13 or later with landlock among its LSMs)")

// Available reports whether Restrict can work here: nil, or an error
// wrapping ErrUnavailable that says why not.
func Available() error {
	abi, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	switch {
	case errno == unix.ENOSYS || errno == unix.EOPNOTSUPP:
		return fmt.Errorf("%w: %v", ErrUnavailable, errno)
	case errno != 0:
		return fmt.Errorf("%w: landlock_create_ruleset: %v", ErrUnavailable, errno)
	case abi < 1:
		return fmt.Errorf("%w: ABI version %d", ErrUnavailable, abi)
	}
	return nil
}

// Restrict makes paths unreadable to the calling thread and to every
// process it starts from now on. The caller must be locked to its thread
// (runtime.LockOSThread) and stay so until it exits: the restriction is the
// thread's. Paths that do not exist are left out; a path that is a symbolic
// link hides its target.
func Restrict(paths []string) error {
	hidden, err := resolve(paths)
	if err != nil || len(hidden) == 0 {
		return err
	}
	attr := unix.LandlockRulesetAttr{Handled_access_fs: unix.LANDLOCK_ACCESS_FS_READ_FILE}
	// Only the first field's size: kernels older than the struct read that much.
	fd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr.Handled_access_fs), 0)
	if errno != 0 {
		return fmt.Errorf("landlock_create_ruleset: %w", errno)
	}
	ruleset := int(fd)
	defer unix.Close(ruleset)
	for _, dir := range ways(hidden) {
		if err := grantEntries(ruleset, dir, hidden); err != nil {
			return err
		}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(ruleset), 0, 0); errno != 0 {
		return fmt.Errorf("landlock_restrict_self: %w", errno)
	}
	return nil
}

// Start starts cmd from a thread of its own, restricted by Restrict(paths),
// so that cmd's process and its children cannot read them while the rest of
// this process can. The thread ends with the call.
func Start(cmd *exec.Cmd, paths []string) error {
	if len(paths) == 0 {
		return cmd.Start()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with this goroutine
		if err := Restrict(paths); err != nil {
			errc <- err
			return
		}
		errc <- cmd.Start()
	}()
	return <-errc
}

// resolve turns paths into the set of absolute, symlink-free paths to hide,
// none beneath another (hiding a directory hides what it holds).
func resolve(paths []string) (map[string]bool, error) {
	hidden := map[string]bool{}
	for _, p := range paths {
		if !filepath.IsAbs(p) {
			return nil, fmt.Errorf("hiding %q: not an absolute path", p)
		}
		real, err := filepath.EvalSymlinks(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("hiding %s: %w", p, err)
		}
		if real == "/" {
			return nil, fmt.Errorf("hiding %s: it is the root directory", p)
		}
		hidden[real] = true
	}
	for p := range hidden {
		for d := filepath.Dir(p); d != "/"; d = filepath.Dir(d) {
			if hidden[d] {
				delete(hidden, p)
				break
			}
		}
	}
	return hidden, nil
}

// ways are the directories on the way to the hidden paths, "/" first.
func ways(hidden map[string]bool) []string {
	seen := map[string]bool{}
	var out []string
	for p := range hidden {
		for d := filepath.Dir(p); !seen[d]; d = filepath.Dir(d) {
			seen[d] = true
			out = append(out, d)
			if d == "/" {
				break
			}
		}
	}
	return out
}

// grantEntries grants reading beneath every entry of dir that neither is a
// hidden path nor leads to one. A directory it cannot list keeps all its
// entries unreadable: failing closed.
func grantEntries(ruleset int, dir string, hidden map[string]bool) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if hidden[p] || leadsTo(p, hidden) || e.Type()&os.ModeSymlink != 0 {
			continue // a link's target is granted (or not) where it lives
		}
		if err := grant(ruleset, p); err != nil {
			return err
		}
	}
	return nil
}

func leadsTo(p string, hidden map[string]bool) bool {
	for h := range hidden {
		if strings.HasPrefix(h, p+"/") {
			return true
		}
	}
	return false
}

// grant adds the rule "read files beneath p". An entry gone since it was
// listed needs none.
func grant(ruleset int, p string) error {
	fd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("granting %s: %w", p, err)
	}
	defer unix.Close(fd)
	rule := unix.LandlockPathBeneathAttr{Allowed_access: unix.LANDLOCK_ACCESS_FS_READ_FILE, Parent_fd: int32(fd)}
	if _, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(ruleset), unix.LANDLOCK_RULE_PATH_BENEATH,
		uintptr(unsafe.Pointer(&rule)), 0, 0, 0); errno != 0 {
		return fmt.Errorf("granting %s: landlock_add_rule: %w", p, errno)
	}
	return nil
}
