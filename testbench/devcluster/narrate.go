package devcluster

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"
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
		case changeStarted:
			c.say("%-16s → %s leads (token %d)", ch.job, ch.l.instance, ch.l.token)
		case changeOver:
			at := time.Now()
			why := c.whyEnded(ctx, ch.job, ch.l.instance, ch.l.token)
			c.ends.note(ch.job, ch.l.token, why)
			c.sayAt(at, "%-16s   %s's term is over (token %d): %s; no leader until another instance wins", ch.job, ch.l.instance, ch.l.token, why)
		}
	})
	if err != nil && ctx.Err() == nil {
		c.log.Warn("watching the leaders", "err", err)
	}
}
