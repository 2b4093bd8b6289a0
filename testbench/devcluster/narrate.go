package devcluster

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/snip/snip-jobs/internal/sleep"
)

// lineWriter writes whole lines, one writer at a time.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

// say writes one timestamped line to the cluster's Out.
func (c *Cluster) say(format string, args ...any) { c.sayAt(time.Now(), format, args...) }

// sayAt writes a line about something that happened at at.
func (c *Cluster) sayAt(at time.Time, format string, args ...any) {
	c.out.mu.Lock()
	defer c.out.mu.Unlock()
	fmt.Fprintf(c.out.w, "%s  %s\n", at.Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// Narrate says who leads each job now, and from then on every change of
// leader as the backend reports it, until Close. Call it once, after printing
// whatever should come first.
func (c *Cluster) Narrate() {
	ctx, cancel := context.WithCancel(context.Background())
	c.stopWatch, c.watchDone = cancel, make(chan struct{})
	go func() {
		defer close(c.watchDone)
		c.narrate(ctx)
	}()
}

func (c *Cluster) narrate(ctx context.Context) {
	err := c.terms.watch(ctx, func(ch leaderChange) {
		switch ch.kind {
		case changeCurrent:
			c.say("%-16s led by %s (token %d)", ch.job, ch.l.instance, ch.l.token)
			if c.isExec(ch.job) {
				go c.narrateProgram(ctx, ch.job, ch.l.token, true)
			}
		case changeStarted:
			c.say("%-16s → %s leads (token %d)", ch.job, ch.l.instance, ch.l.token)
			if c.isExec(ch.job) {
				go c.narrateProgram(ctx, ch.job, ch.l.token, true)
			}
		case changeOver:
			at := time.Now()
			why := c.whyEnded(ctx, ch.job, ch.l.instance, ch.l.token)
			c.ends.note(ch.job, ch.l.token, why)
			c.sayAt(at, "%-16s   %s's term is over (token %d): %s; no leader until another instance wins", ch.job, ch.l.instance, ch.l.token, why)
			if c.isExec(ch.job) {
				go c.narrateProgram(ctx, ch.job, ch.l.token, false)
			}
		}
	})
	if err != nil && ctx.Err() == nil {
		c.log.Warn("watching the leaders", "err", err)
	}
}

// isExec reports whether job is of the exec type, whose program's start and
// end the narration says.
func (c *Cluster) isExec(job string) bool {
	for _, j := range c.jobs {
		if j.Name == job {
			return j.Type == "exec"
		}
	}
	return false
}

// narrateProgram says, once job_runs records it (or not within recordWait),
// that the program of the term with token started (its pid), or how it
// ended: stopped with its tree, or cut off.
func (c *Cluster) narrateProgram(ctx context.Context, job string, token int64, started bool) {
	deadline := time.Now().Add(recordWait)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		var pid int
		var result string
		err := c.pool.QueryRow(ctx, `SELECT coalesce(pid, 0), coalesce(result, '') FROM job_runs
			WHERE job = $1 AND token = $2 ORDER BY id DESC LIMIT 1`, job, token).Scan(&pid, &result)
		switch {
		case err == nil && started && pid != 0:
			c.say("%-16s   its program runs (pid %d, token %d; the status page shows it)", job, pid, token)
			return
		case err == nil && !started && result != "":
			c.say("%-16s   token %d's program (pid %d) is over, every process of it gone: %s", job, token, pid, result)
			return
		}
		sleep.For(ctx, recordPoll)
	}
}
