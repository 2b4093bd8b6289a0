package certsync

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/snip/snip-jobs/internal/command"
	"github.com/snip/snip-jobs/internal/unreadable"
)

// owe records, before the first change of a batch, that a reload is owed:
// in memory, and in .certsync/reload-pending, so that a process stopped
// between the change and the reload still reloads at its next start.
func (j *Job) owe(d *exportDir) error {
	if len(j.opts.Reload) == 0 || j.dirty {
		return nil
	}
	fd, err := unix.Openat(d.work, reloadMarker, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("certsync: record that a reload is owed in %s: %w", filepath.Join(d.path, workDir, reloadMarker), err)
	}
	unix.Close(fd)
	if err := unix.Fsync(d.work); err != nil {
		return fmt.Errorf("certsync: fsync the directory %s: %w", filepath.Join(d.path, workDir), err)
	}
	j.dirty = true
	return nil
}

// owedBefore reports whether an earlier run left a reload owed (or whether
// that cannot be told: then one more reload is the safe side).
func (j *Job) owedBefore(ctx context.Context, log *slog.Logger, d *exportDir) bool {
	if len(j.opts.Reload) == 0 {
		return false
	}
	var st unix.Stat_t
	err := unix.Fstatat(d.work, reloadMarker, &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case err == nil:
		log.InfoContext(ctx, "certsync: a reload was owed when the job last stopped; it runs after the first sync")
		return true
	case errors.Is(err, unix.ENOENT):
		return false
	default:
		log.WarnContext(ctx, "certsync: cannot tell whether a reload is owed from before; reloading after the first sync", "err", err)
		return true
	}
}

// outputLimit is how much of the reload command's output a failure logs.
const outputLimit = 4 << 10

// reload runs the reload command, if there is one, and on success clears
// what owe recorded.
//
// The command gets childEnv as its whole environment, never the service's:
// that holds the database URL and the sealing keys; nor can it read the
// service's secret files (j.hide). Its output is logged
// only when it fails, redacted (command.Redactor) and cut at outputLimit.
func (j *Job) reload(ctx context.Context, log *slog.Logger, d *exportDir) error {
	argv := j.opts.Reload
	if len(argv) == 0 {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, j.opts.ReloadTimeout)
	defer cancel()
	cmd := exec.CommandContext(rctx, argv[0], argv[1:]...)
	cmd.Env = j.childEnv()
	cmd.WaitDelay = time.Second // a child that keeps the output open does not hold the job
	out := &capped{max: j.redact.Capture(outputLimit)}
	cmd.Stdout, cmd.Stderr = out, out
	start := time.Now()
	err := unreadable.Start(cmd, j.hide)
	if err == nil {
		err = cmd.Wait()
	}
	if err != nil && errors.Is(rctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("timed out after %v (killed): %w", j.opts.ReloadTimeout, err)
	}
	if err == nil {
		if rerr := unix.Unlinkat(d.work, reloadMarker, 0); rerr != nil && !errors.Is(rerr, unix.ENOENT) {
			err = fmt.Errorf("it succeeded, but the record of the reload owed stays: %w", rerr)
		}
	}
	shown := j.redact.Args(argv)
	if err != nil {
		j.m.reloads.WithLabelValues("failed").Inc()
		output, cut := j.redact.Redact(bytes.TrimSpace(out.Bytes()), outputLimit)
		if cut || out.overflow {
			output += " …(cut)"
		}
		log.ErrorContext(ctx, "certsync: the reload command failed; it runs again at the next change or after a back-off",
			"command", shown, "err", err, "output", output)
		return fmt.Errorf("certsync: reload command %q: %w", strings.Join(shown, " "), err)
	}
	j.m.reloads.WithLabelValues("ok").Inc()
	log.InfoContext(ctx, "certsync: reload command done", "command", shown, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// childEnv is the reload command's whole environment (command.Env): PATH,
// the language and time zone, and what the command may want to know:
// SNIP_CERTSYNC_DIR, the directory, and SNIP_CERTSYNC_JOB, the job's name.
func (j *Job) childEnv() []string {
	return command.Env(j.redact, []string{j.opts.KeyEnv}, "SNIP_CERTSYNC_DIR="+j.opts.Dir, "SNIP_CERTSYNC_JOB="+j.name)
}

// capped keeps the first max bytes written to it.
type capped struct {
	bytes.Buffer
	max      int
	overflow bool // more was written
}

func (c *capped) Write(p []byte) (int, error) {
	room := c.max - c.Len()
	if room > 0 {
		c.Buffer.Write(p[:min(len(p), room)])
	}
	if len(p) > room {
		c.overflow = true
	}
	return len(p), nil
}
