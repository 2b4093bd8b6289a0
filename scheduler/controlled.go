package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/snip/snip-jobs/scheduler/controls"
)

// openControls sets up the operators' controls: those given, or a feed of
// the scheduler's own when it has a database.
func (s *Scheduler) openControls() error {
	ctl := s.cfg.Controls
	if ctl == nil && s.cfg.Pool != nil {
		resync := time.Second
		if s.cfg.Session != nil {
			resync = s.cfg.Session.Config().RenewInterval
		}
		feed, err := controls.NewFeed(controls.FeedConfig{DB: s.cfg.Pool.Config().ConnConfig, Instance: s.instance,
			Resync: resync, Log: s.log})
		if err != nil {
			return fmt.Errorf("scheduler: %w", err)
		}
		s.feed, ctl = feed, feed
	}
	s.gate = &gate{ctl: ctl, instance: s.instance, pool: s.rec.pool}
	return nil
}

// ControlsRead says whether the operators' controls have been read (no job
// runs before): nil, or why not. For /readyz.
func (s *Scheduler) ControlsRead() error {
	if s.gate.ctl == nil {
		return nil
	}
	if _, read := s.gate.ctl.Current(); !read {
		return errControlsUnread
	}
	return nil
}

// WaitControls waits until the operators' controls have been read once (no
// job runs before), or ctx ends (its error).
func (s *Scheduler) WaitControls(ctx context.Context) error {
	for {
		ch := s.gate.changed()
		if s.ControlsRead() == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// gated runs job j, which has no terms (it runs everywhere, or in database
// mode), while the controls let it run here, until ctx ends: while it is
// paused (or, database mode, this instance is drained) nothing of it runs;
// a run in progress when that happens is cancelled (its context's cause the
// *HeldError) and waited for up to the job's grace (an overrun past it is
// counted and logged). Its manual runs go alongside.
func (s *Scheduler) gated(ctx context.Context, j *job) {
	for ctx.Err() == nil {
		if !s.gate.wait(ctx, j) || !programsGone(ctx, j) {
			return
		}
		rctx, stop := s.gate.whileAllowed(withSerial(ctx), j)
		done := make(chan struct{})
		var ran error
		go func() {
			defer close(done)
			manual := make(chan struct{})
			go func() {
				defer close(manual)
				if j.mode == everywhere {
					s.run.manualEverywhere(rctx, j, s.gate)
				} else {
					s.run.manualDatabase(rctx, j, s.gate)
				}
			}()
			if j.mode == everywhere {
				ran = s.run.everywhere(rctx, j)
			} else {
				ran = s.run.database(rctx, j)
			}
			<-manual
		}()
		select {
		case <-done:
			if errors.As(ran, new(*HeldError)) {
				// The run's record found the job held back before the
				// controls' feed did: wait for the feed's next read.
				stop()
				select {
				case <-ctx.Done():
				case <-s.gate.changed():
				}
				continue
			}
		case <-rctx.Done():
			if ctx.Err() != nil {
				<-done // shutdown: watchGrace counts an overrun
			} else {
				s.awaitHeld(j, done, context.Cause(rctx))
			}
		}
		stop()
	}
}

// awaitHeld waits up to the job's grace for its runs to return after the
// controls held it back; past it, the overrun is counted and logged.
func (s *Scheduler) awaitHeld(j *job, done <-chan struct{}, cause error) {
	j.log.Info("stopping the job here", "why", cause)
	grace := time.NewTimer(j.spec.Grace)
	defer grace.Stop()
	select {
	case <-done:
	case <-grace.C:
		s.m.overruns.WithLabelValues(j.spec.Name).Inc()
		j.log.Error(MsgHeldOverrun, "grace", j.spec.Grace, "cause", cause)
	}
}

// MsgHeldOverrun is the message of the log line (level ERROR, with job,
// instance, grace and cause) for a job without terms still running its
// grace period after an operator paused it (or drained its instance).
const MsgHeldOverrun = "job still running after its grace period once paused; it goes on until it returns"

// pausedSingletons counts the leader-mode jobs that are paused now: nobody
// leads them, and the spread must not wait for a leader of theirs.
func (g *gate) pausedSingletons(jobs []*job) int {
	st := g.state()
	n := 0
	for _, j := range jobs {
		if _, ok := st.Paused(j.spec.Name); ok && j.mode == leaderMode {
			n++
		}
	}
	return n
}

// undrained removes the drained instances from a cluster load: a drained
// instance takes no term, so the spread counts it as no candidate (nobody
// holds back for it, nobody hands a job over to it).
func (g *gate) undrained(load map[string]int) map[string]int {
	st := g.state()
	for name := range st.Drains {
		delete(load, name)
	}
	return load
}

// The series of the operators' controls, read at scrape time.
var (
	descPaused = prometheus.NewDesc("snip_jobs_job_paused",
		"1 while an operator has paused the job (snip-jobs pause): no instance runs it.", []string{"job"}, nil)
	descPausedSince = prometheus.NewDesc("snip_jobs_job_paused_since_seconds",
		"When the job was paused, in seconds since the Unix epoch (the database's clock); 0 while it is not.", []string{"job"}, nil)
	descDrained = prometheus.NewDesc("snip_jobs_instance_drained",
		"1 while an operator has drained this instance (snip-jobs drain): it leads no singleton.", nil, nil)
	descControlsUp = prometheus.NewDesc("snip_jobs_controls_up",
		"1 while this instance's feed of the operators' controls is connected to PostgreSQL and current.", nil, nil)
)

// controlsSeries exports the controls as this instance last read them.
func (s *Scheduler) controlsSeries(ch chan<- prometheus.Metric) {
	st := s.gate.state()
	for _, j := range s.jobs {
		paused, since := 0.0, 0.0
		if p, ok := st.Paused(j.spec.Name); ok {
			paused, since = 1, float64(p.Since.UnixNano())/1e9
		}
		ch <- prometheus.MustNewConstMetric(descPaused, prometheus.GaugeValue, paused, j.spec.Name)
		ch <- prometheus.MustNewConstMetric(descPausedSince, prometheus.GaugeValue, since, j.spec.Name)
	}
	drained := 0.0
	if _, ok := st.Drained(s.instance); ok {
		drained = 1
	}
	ch <- prometheus.MustNewConstMetric(descDrained, prometheus.GaugeValue, drained)
	if s.feed != nil {
		up := 0.0
		if s.feed.Up() {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(descControlsUp, prometheus.GaugeValue, up)
	}
}

// controlsDescs are the descriptions of controlsSeries.
var controlsDescs = []*prometheus.Desc{descPaused, descPausedSince, descDrained, descControlsUp}
