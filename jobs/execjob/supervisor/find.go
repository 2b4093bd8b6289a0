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

// instanceArg starts the argument that names a supervisor's instance.
const instanceArg = "instance="

// Supervising lists the pids of the live supervisors of instance's runs on
// this host, as /proc shows them (those of this user and of the users it may
// see).
func Supervising(instance string) ([]int, error) {
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return nil, err
	}
	want := []byte(instanceArg + instance)
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

// WaitGone waits until no supervisor of instance's runs is alive on this
// host, or ctx ends (its error, naming those left). A supervisor whose
// snip-jobs died kills its program's tree at once and exits once the tree is
// gone: after this, no program of the dead instance runs here.
func WaitGone(ctx context.Context, instance string) error {
	for {
		pids, err := Supervising(instance)
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
