package chaos

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// ControlKindStats is the figures of the operators' controls' kinds.
type ControlKindStats struct {
	Stopped Dist // operator-pause: the pause's commit → its job's leader key gone
	Resumed Dist // operator-pause: the resume's commit → the job's next term
	Done    Dist // manual-run: a request → done (the database's clock)
	// Asked and Refused count the runs of a paused job asked for and
	// refused; CatchUp the resumes with --catch-up.
	Asked, Refused, CatchUp int
	// Commands, Joined and Requests are manual-run's `run` commands, those
	// that joined an open request, and the requests.
	Commands, Joined, Requests int
	// Strikes counts manual-run's strikes of the claimer, by how (sigstop,
	// sigkill, missed) and when (in flight, after its effect).
	Strikes map[string]int `json:",omitempty"`
	// Jobs counts manual-run's faults by the job they asked runs of.
	Jobs map[string]int `json:",omitempty"`
	// Restarted counts the drained instances restarted while drained.
	Restarted int
}

// controlAcc gathers the figures of the operators' controls of one kind.
type controlAcc struct {
	s                      ControlKindStats
	stopped, resumed, done []time.Duration
}

func (a *controlAcc) add(f *Fault) {
	c := f.Controls
	if c == nil {
		return
	}
	if f.Kind == OperatorPause {
		a.stopped = append(a.stopped, c.Stopped)
		a.resumed = append(a.resumed, c.Resumed)
	}
	a.done = append(a.done, c.Done...)
	a.s.Asked += b2i(f.Kind == OperatorPause && !continuous(f.Job))
	a.s.Refused += b2i(c.Refused)
	a.s.CatchUp += b2i(c.CatchUp)
	a.s.Restarted += b2i(c.Restarted)
	a.s.Commands += c.Commands
	a.s.Joined += c.Joined
	a.s.Requests += len(c.Requests)
	if c.Strike != "" {
		a.s.Strikes = inc(a.s.Strikes, strings.TrimSpace(c.Strike+" "+c.StruckAt))
	}
	if f.Kind == ManualRun && f.Job != "" {
		a.s.Jobs = inc(a.s.Jobs, f.Job)
	}
}

// inc counts one more key in m, made if nil.
func inc(m map[string]int, key string) map[string]int {
	if m == nil {
		m = map[string]int{}
	}
	m[key]++
	return m
}

// counted lists m's counts, by key.
func counted(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func (a *controlAcc) stats() ControlKindStats {
	a.s.Stopped, a.s.Resumed, a.s.Done = dist(a.stopped), dist(a.resumed), dist(a.done)
	return a.s
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// controlsOther is the "other" column's figures of the controls' kinds.
func (s KindStats) controlsOther() []string {
	c := s.Controls
	var out []string
	switch s.Kind {
	case OperatorPause:
		out = append(out, "pause → term over "+c.Stopped.String(), "resume → new term "+c.Resumed.String(),
			fmt.Sprintf("`run` of the paused job refused %d of %d (none asked of the continuous aggregator and script)", c.Refused, c.Asked))
		if c.CatchUp > 0 {
			out = append(out, fmt.Sprintf("resumed with --catch-up: %d", c.CatchUp))
		}
	case ManualRun:
		out = append(out, "request → done "+c.Done.String(),
			fmt.Sprintf("%d concurrent `run --wait`, %d joined an open request, %d requests", c.Commands, c.Joined, c.Requests))
		if len(c.Jobs) > 0 {
			out = append(out, "runs of "+counted(c.Jobs))
		}
		if len(c.Strikes) > 0 {
			out = append(out, "claimer struck: "+counted(c.Strikes))
		}
	case Drain:
		out = append(out, fmt.Sprintf("restarted while drained: %d", c.Restarted))
	}
	return out
}
