package execjob

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/snip/snip-jobs/jobs/execjob/supervisor"
	"github.com/snip/snip-jobs/scheduler"
)

// watchedCtx counts how often its Done is asked for: once per turn of a
// loop that selects on it.
type watchedCtx struct {
	context.Context
	asked atomic.Int64
}

func (c *watchedCtx) Done() <-chan struct{} {
	c.asked.Add(1)
	return c.Context.Done()
}

// A run whose context ended waits for its program's tree to die (here for
// the whole kill grace: the program ignores SIGTERM) without turning its
// loop over the ended context: before, it spun a core for up to the kill
// grace (5 s by default) at every stop of such a program.
func TestAStoppedRunWaitsForItsTreeWithoutSpinning(t *testing.T) {
	prog := filepath.Join(t.TempDir(), "deaf.sh")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\ntrap '' TERM\nwhile :; do sleep 1; done\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	p, err := supervisor.Start(context.Background(), supervisor.Spec{Path: prog, Env: []string{"PATH=/usr/bin:/bin"}})
	if err != nil {
		t.Fatal(err)
	}
	grace := 500 * time.Millisecond
	j := &job{opts: Options{KillGrace: grace}}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	ctx := &watchedCtx{Context: ended}
	began := time.Now()
	sent, why := j.supervise(ctx, scheduler.NewRun(scheduler.RunConfig{Job: "deaf"}), p, began)
	if why == nil || sent.IsZero() {
		t.Fatalf("the run was not stopped: %v at %v", why, sent)
	}
	if res := p.Result(); res.Killed == 0 {
		t.Errorf("the program deaf to SIGTERM was not killed: %+v", res)
	}
	if n := ctx.asked.Load(); n > 20 {
		t.Errorf("the loop looked at the ended context %d times while the tree took %v to die (its kill grace %v): it spun",
			n, time.Since(began).Round(time.Millisecond), grace)
	}
}
