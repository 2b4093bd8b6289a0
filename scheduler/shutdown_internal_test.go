package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/testbench/benchtest"
)

// A job that runs everywhere has no term, but its grace still bounds its stop
// at shutdown: one that ignores its context is logged and counted as an
// overrun once the grace has passed; one that stops is not.
func TestAJobWithoutTermsThatIgnoresShutdownIsCountedAsAnOverrun(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	started := make(chan string, 2)
	reg, _ := NewRegistry(Type{Name: "job", New: func(_ Env, spec configs.Job) (Job, error) {
		return JobFunc(func(ctx context.Context, r *Run) error {
			started <- r.Job
			if r.Job == "stubborn" {
				<-release // ignores ctx
				return nil
			}
			<-ctx.Done()
			return ctx.Err()
		}), nil
	}})
	everywhere := func(name string) configs.Job {
		return configs.Job{Name: name, Type: "job", Singleton: false, Grace: 200 * time.Millisecond,
			Schedule: configs.Schedule{Kind: configs.Continuous}}
	}
	s, err := New(Config{File: &configs.File{Instance: "server-1", Jobs: []configs.Job{everywhere("stubborn"), everywhere("polite")}}, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	<-started
	<-started
	cancel()
	overruns := func(job string) float64 { return testutil.ToFloat64(s.m.overruns.WithLabelValues(job)) }
	benchtest.Eventually(t, "the stubborn job counted as an overrun", func() bool { return overruns("stubborn") == 1 })
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := overruns("polite"); n != 0 {
		t.Errorf("the job that stopped was counted %v overruns, want 0", n)
	}
}
