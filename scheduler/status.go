package scheduler

import (
	"time"

	"github.com/snip/snip-jobs/scheduler/status"
)

// Status is this instance's own view of its jobs, without I/O: the term each
// holds and its last run here.
func (s *Scheduler) Status() []status.Job {
	out := make([]status.Job, 0, len(s.jobs))
	for _, j := range s.jobs {
		st := status.Describe(j.spec)
		if p, ok := s.gate.state().Paused(j.spec.Name); ok {
			st.Paused = &p
		}
		j.mu.Lock()
		if t := j.term; t != nil && t.Valid() {
			st.Leading, st.Token, st.Since = true, t.Token(), t.Started()
			st.Headroom = max(0, time.Until(t.Deadline()))
		}
		if j.last != nil {
			last := *j.last
			st.LastRun = &last
		}
		j.mu.Unlock()
		out = append(out, st)
	}
	return out
}

// Leading is the number of terms this instance holds now.
func (s *Scheduler) Leading() int { return int(s.spread.leading.Load()) }
