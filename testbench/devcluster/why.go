package devcluster

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/snip/snip-jobs/app/statuspage"
	"github.com/snip/snip-jobs/internal/sleep"
)

// How long the narrator waits for an instance that is still running to record
// why its term ended (job_terms.reason, written just after the hand-over),
// and how often it looks.
const (
	recordWait = 3 * time.Second
	recordPoll = 20 * time.Millisecond
)

// whyEnded says why a term ended, in the words the status page uses: the
// reason its instance recorded, or what the supervisor did to the process (a
// killed or paused instance records nothing itself: its successor, or the
// reclaim of its dead process, records what they know, which the supervisor
// knows better). etcd alone cannot say: a key deleted by a resignation and
// one whose lease ran out look the same.
func (c *Cluster) whyEnded(ctx context.Context, job, instance string, token int64) string {
	deadline := time.Now().Add(recordWait)
	for {
		label, own := c.recordedEnd(ctx, job, instance, token)
		if own {
			return statuspage.EndReason(label)
		}
		if why := c.processEnd(instance); why != "" {
			if label, own := c.recordedEnd(ctx, job, instance, token); own {
				return statuspage.EndReason(label) // recorded just before it exited
			}
			return why
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			if label != "" {
				return statuspage.EndReason(label)
			}
			return fmt.Sprintf("its lease ended, and %s recorded no reason (paused by hand, or cut off from the database?)", instance)
		}
		sleep.For(ctx, recordPoll)
	}
}

// recordedEnd is the reason recorded in job_terms for the term ("" if none
// yet), and whether instance, the term's own, recorded it.
func (c *Cluster) recordedEnd(ctx context.Context, job, instance string, token int64) (reason string, own bool) {
	if c.pool == nil {
		return "", false
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var by string
	if err := c.pool.QueryRow(ctx, `SELECT coalesce(reason, ''), coalesce(ended_by, '') FROM job_terms WHERE job = $1 AND token = $2`,
		job, token).Scan(&reason, &by); err != nil {
		return "", false
	}
	return reason, reason != "" && (by == instance || by == "")
}

// processEnd says what became of the instance's process if that explains a
// term's end: killed (or exited) or paused; "" while it runs.
func (c *Cluster) processEnd(instance string) string {
	for _, ch := range c.children {
		if ch.name != instance {
			continue
		}
		switch st := ch.info(); st.State {
		case stateExited:
			if st.Exit == "killed by SIGKILL" {
				return fmt.Sprintf("%s was killed by SIGKILL: no resign", instance)
			}
			return fmt.Sprintf("%s exited (%s) without resigning", instance, st.Exit)
		case statePaused:
			return fmt.Sprintf("%s is paused (SIGSTOP): its lease expired", instance)
		}
	}
	return ""
}

// endsKept bounds how many ends the supervisor remembers for the pages.
const endsKept = 500

// endLog is why terms ended, as narrated; the status pages show it on their
// timelines (statuspage.DevState.Ends).
type endLog struct {
	mu   sync.Mutex
	ends []statuspage.DevEnd
}

func (l *endLog) note(job string, token int64, why string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ends = append(l.ends, statuspage.DevEnd{Job: job, Token: token, Reason: why})
	if len(l.ends) > endsKept {
		l.ends = append([]statuspage.DevEnd(nil), l.ends[len(l.ends)-endsKept:]...)
	}
}

func (l *endLog) list() []statuspage.DevEnd {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]statuspage.DevEnd(nil), l.ends...)
}
