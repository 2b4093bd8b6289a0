package service

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Undumpable marks the process non-dumpable, as run does first: its
// /proc/<pid>/environ, mem and the like then belong to root, so no process
// of the service's own user (a reload command, an exec job's program, or
// anything else that user runs) can read the database URL, the etcd
// password or the sealing keys from its environment or memory, and it
// leaves no core dump. Root with CAP_SYS_PTRACE still can. The flag is
// the process's; a program it starts is dumpable again after its exec (and
// is given a minimal environment anyway).
func Undumpable() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_DUMPABLE, 0): %w", err)
	}
	return nil
}
