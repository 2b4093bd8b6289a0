package supervisor

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// ownerArg is the argument that names the process whose run a supervisor
// serves: the instance, and its pid (instance names repeat across test
// clusters on one host; a pid names one process).
func ownerArg(instance string, pid int) string {
	return "instance=" + instance + ",pid=" + strconv.Itoa(pid)
}

// Supervising lists the pids of the live supervisors that process pid of
// instance started on this host, as /proc shows them (those of this user and
// of the users it may see).
func Supervising(instance string, pid int) ([]int, error) {
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return nil, err
	}
	want := []byte(ownerArg(instance, pid))
	var out []int
	for _, d := range dirs {
		b, err := os.ReadFile(d + "/cmdline")
		if err != nil {
			continue // gone meanwhile, or not ours to read
		}
		args := bytes.Split(bytes.TrimRight(b, "\x00"), []byte{0})
		if len(args) > 2 && string(args[1]) == Arg && bytes.Equal(args[2], want) {
			if pid, err := strconv.Atoi(filepath.Base(d)); err == nil {
				out = append(out, pid)
			}
		}
	}
	return out, nil
}

// WaitGone waits until no supervisor that process pid of instance started
// is alive on this host, or ctx ends (its error, naming those left). A
// supervisor whose snip-jobs died kills its program's tree at once and exits
// once the tree is gone: after this, no program of the dead process runs
// here.
func WaitGone(ctx context.Context, instance string, pid int) error {
	for {
		pids, err := Supervising(instance, pid)
		if err != nil || len(pids) == 0 {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("supervisors of %s still running (pids %v): %w", instance, pids, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
