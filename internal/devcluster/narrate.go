package devcluster

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/snip/snip-jobs/leadership"
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
// leader as etcd reports it, until Close. Call it once, after printing
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
	key := leadership.LeaderKey(prefix, "")
	resp, err := c.cli.Get(ctx, key, clientv3.WithPrefix())
	if err != nil {
		if ctx.Err() == nil {
			c.log.Warn("cannot read the leaders", "err", err)
		}
		return
	}
	for _, kv := range resp.Kvs {
		c.say("%-16s led by %s (token %d)", strings.TrimPrefix(string(kv.Key), key), leaderName(kv.Value), kv.CreateRevision)
	}
	for wr := range c.cli.Watch(ctx, key, clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithRev(resp.Header.Revision+1)) {
		if err := wr.Err(); err != nil {
			if ctx.Err() == nil {
				c.log.Warn("watching the leaders", "err", err)
			}
			return
		}
		for _, ev := range wr.Events {
			job := strings.TrimPrefix(string(ev.Kv.Key), key)
			switch {
			case ev.Type == clientv3.EventTypePut && ev.IsCreate():
				c.say("%-16s → %s leads (token %d)", job, leaderName(ev.Kv.Value), ev.Kv.CreateRevision)
			case ev.Type == clientv3.EventTypeDelete && ev.PrevKv != nil:
				at, name, token := time.Now(), leaderName(ev.PrevKv.Value), ev.PrevKv.CreateRevision
				why := c.whyEnded(ctx, job, name, token)
				c.ends.note(job, token, why)
				c.sayAt(at, "%-16s   %s's term is over (token %d): %s; no leader until another instance wins", job, name, token, why)
			}
		}
	}
}

func leaderName(value []byte) string {
	var rec leadership.LeaderRecord
	if err := json.Unmarshal(value, &rec); err != nil || rec.Instance == "" {
		return "?"
	}
	return rec.Instance
}
