package chaos

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The operators' controls, checked (InvPaused, InvManual, InvDrained): what
// the harness logged of the pauses and drains (chaos_controls: resume and
// undrain delete their rows), the runs the instances recorded (chaos_runs,
// a copy of job_runs, which is pruned), the manual run requests
// (manual_runs), and the probe's rows, which name the request their run
// executed (@manual_run).

// controlWindow is a pause of a job or a drain of an instance: when its row
// committed, and when the delete that lifted it did (zero: in force at the
// end). The database's clock.
type controlWindow struct {
	Kind      string // pause or drain
	Subject   string // the job, the instance
	Since     time.Time
	Committed time.Time
	Lifted    time.Time
}

// runRow is a run the instances recorded in job_runs.
type runRow struct {
	ID       int64
	Job      string
	Instance string
	Token    int64
	Trigger  string
	Started  time.Time
	Finished *time.Time // nil while open
	Result   string
}

// manualRun is an operator's manual run request as it ended.
type manualRun struct {
	ID          int64
	Job         string
	State       string
	Instance    string // its last claimer
	Token       int64  // and its token
	RunID       int64  // the run that completed it (job_runs; 0: none recorded)
	Attempts    int
	RequestedAt time.Time
	Finished    time.Time // zero while open
}

// controlFacts is what the controls' checks read besides the other facts.
type controlFacts struct {
	windows  []controlWindow
	runs     []runRow
	manual   []manualRun
	changes  []manualChange // the requests' claims and completions, in commit order
	passEnds []passEnd      // the renewer's passes ended, in commit order
}

// ControlStats counts what the controls' checks checked.
type ControlStats struct {
	Pauses, Drains int // pauses and drains lifted or in force
	Acts           int // terms, recorded runs and transactions of writes checked against them
	// ManualRuns are the requests; Done those done; TakenOver those claimed
	// more than once (an earlier claimer stopped before it was over);
	// Executed the probe's rows written by manual runs.
	ManualRuns, Done, TakenOver, Executed int
	// Manual is what InvManualEffect checked of the weekly report's and the
	// renewer's manual runs (nil in reports written before it was checked).
	Manual []ManualJobStats `json:",omitempty"`
}

// ManualChecked counts the manual runs whose execution was checked: the
// probe's rows written by manual runs, and the other jobs' requests (a
// weekly report's run on a week already stored leaves no trace of its own,
// and one struck after its commit is recorded cut off: checked, not counted
// as executed).
func (s ControlStats) ManualChecked() int {
	n := s.Executed
	for _, j := range s.Manual {
		n += j.Requests
	}
	return n
}

func readControls(ctx context.Context, pool *pgxpool.Pool) (*controlFacts, error) {
	c := &controlFacts{}
	read := func(what, sql string, into func(pgx.Rows) error) error {
		rows, err := pool.Query(ctx, sql)
		if err == nil {
			err = into(rows)
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", what, err)
		}
		return nil
	}
	err := read("chaos_controls", `SELECT kind, subject, since, committed, coalesce(lifted, 'epoch') FROM chaos_controls ORDER BY committed`,
		func(rows pgx.Rows) (err error) {
			c.windows, err = pgx.CollectRows(rows, pgx.RowToStructByPos[controlWindow])
			return err
		})
	if err == nil {
		err = read("chaos_runs", `SELECT id, job, instance, token, coalesce(trigger, ''), started_at, finished_at, coalesce(result, '')
			FROM chaos_runs ORDER BY id`,
			func(rows pgx.Rows) (err error) {
				c.runs, err = pgx.CollectRows(rows, pgx.RowToStructByPos[runRow])
				return err
			})
	}
	if err == nil {
		err = read("manual_runs", `SELECT id, job, state, coalesce(instance, ''), coalesce(token, 0), coalesce(run_id, 0), attempts,
			requested_at, coalesce(finished_at, 'epoch') FROM manual_runs ORDER BY id`,
			func(rows pgx.Rows) (err error) {
				c.manual, err = pgx.CollectRows(rows, pgx.RowToStructByPos[manualRun])
				return err
			})
	}
	if err == nil {
		err = readManualLog(ctx, pool, c)
	}
	if err != nil {
		return nil, err
	}
	for i, w := range c.windows {
		if w.Lifted.Unix() == 0 {
			c.windows[i].Lifted = time.Time{}
		}
	}
	for i, m := range c.manual {
		if m.Finished.Unix() == 0 {
			c.manual[i].Finished = time.Time{}
		}
	}
	return c, nil
}

// act is something a job began on an instance: a term, a run, a
// transaction that wrote.
type act struct {
	What     string
	Job      string
	Instance string
	At       time.Time
	// Grace is how long after the control is noticed the act may still
	// begin: an exec program's writes, until its SIGKILL (kill_grace after
	// its SIGTERM, which the harness's program ignores); 0 for the rest.
	Grace time.Duration
}

func (a act) String() string {
	return fmt.Sprintf("%s by %s began at %s", a.What, a.Instance, a.At.Format("15:04:05.000"))
}

// acts lists what the jobs began: each term (when the observer saw it
// granted or the instance recorded it, whichever came first), each run the
// instances recorded, each probe row's transaction and each transaction of
// logged writes.
func (f *facts) acts() []act {
	var out []act
	terms := map[termKey]act{}
	for k, e := range f.terms {
		terms[k] = act{What: fmt.Sprintf("term %d of %s", k.Token, e.Job), Job: e.Job, Instance: e.Instance, At: e.At}
	}
	for _, t := range f.jobTerms {
		k := termKey{t.Job, t.Token}
		if a, ok := terms[k]; !ok || t.Started.Before(a.At) {
			terms[k] = act{What: fmt.Sprintf("term %d of %s", t.Token, t.Job), Job: t.Job, Instance: t.Instance, At: t.Started}
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(terms), func(a, b termKey) int {
		return cmp.Or(cmp.Compare(a.Token, b.Token), strings.Compare(a.Job, b.Job))
	}) {
		out = append(out, terms[k])
	}
	if f.ctl != nil {
		for _, r := range f.ctl.runs {
			out = append(out, act{What: fmt.Sprintf("run %d of %s (%s, token %d)", r.ID, r.Job, r.Trigger, r.Token), Job: r.Job, Instance: r.Instance, At: r.Started})
		}
	}
	for _, r := range f.probe {
		out = append(out, act{What: fmt.Sprintf("probe row %d's transaction (token %d)", r.ID, r.Token), Job: JobProbe, Instance: r.Instance, At: r.Began})
	}
	seen := map[string]bool{}
	for _, w := range f.writes {
		if seen[w.Xact] {
			continue
		}
		seen[w.Xact] = true
		writer, _ := w.writer()
		a := act{What: fmt.Sprintf("%s's transaction %s (%s %s, token %d)", w.Job, w.Xact, w.Table, strings.ToLower(w.Op), w.Token),
			Job: w.Job, Instance: writer, At: w.Began}
		if w.Job == JobScript {
			a.Grace = scriptKillGrace
		}
		out = append(out, a)
	}
	return out
}

// inForce reports whether t lies from a renew interval after w's commit
// until it was lifted.
func (w controlWindow) inForce(t time.Time, renew time.Duration) bool {
	return !t.Before(w.Committed.Add(renew)) && (w.Lifted.IsZero() || t.Before(w.Lifted))
}

func (w controlWindow) String() string {
	lifted := "never lifted"
	if !w.Lifted.IsZero() {
		lifted = "lifted at " + w.Lifted.Format("15:04:05.000")
	}
	return fmt.Sprintf("%s of %s committed at %s, %s", w.Kind, w.Subject, w.Committed.Format("15:04:05.000"), lifted)
}

// checkControls checks the pauses and drains against what the jobs began,
// and the manual runs against the probe's rows and the recorded runs.
func (k *checker) checkControls(f *facts) ControlStats {
	var s ControlStats
	if f.ctl == nil {
		return s
	}
	acts := f.acts()
	s.Acts = len(acts)
	for _, w := range f.ctl.windows {
		inv, mine := InvPaused, func(a act) bool { return a.Job == w.Subject }
		if w.Kind == "drain" {
			s.Drains++
			inv, mine = InvDrained, func(a act) bool { return a.Instance == w.Subject }
		} else {
			s.Pauses++
		}
		for _, a := range acts {
			if mine(a) && w.inForce(a.At, k.renew+a.Grace) {
				k.violate(inv, "%s, %v after the %s's commit (%s)", a, a.At.Sub(w.Committed).Round(time.Millisecond), w.Kind, w)
			}
		}
		for _, m := range f.ctl.manual {
			if w.Kind == "pause" && m.Job == w.Subject && w.inForce(m.RequestedAt, k.renew) {
				k.violate(InvPaused, "manual run %d of %s was requested at %s, while it was paused (%s): a request of a paused job is refused",
					m.ID, m.Job, m.RequestedAt.Format("15:04:05.000"), w)
			}
		}
	}
	k.checkManual(f, &s)
	k.checkEffects(f, &s)
	return s
}

// checkManual checks each manual run request: the probe's are executed once
// (a done request by exactly one committed probe row, which names it and
// carries its claimer's token; another by none), and a request's run (run_id)
// is a manual run its claimer recorded.
func (k *checker) checkManual(f *facts, s *ControlStats) {
	rows := map[int64][]probeRow{}
	for _, r := range f.probe {
		switch {
		case r.ManualRun != 0:
			rows[r.ManualRun] = append(rows[r.ManualRun], r)
			s.Executed++
		case r.Trigger == "manual":
			k.violate(InvManual, "probe row %d by %s (token %d) was written by a manual run that names no request", r.ID, r.Instance, r.Token)
		}
	}
	runs := map[int64]runRow{}
	for _, r := range f.ctl.runs {
		runs[r.ID] = r
	}
	requests := map[int64]bool{}
	for _, m := range f.ctl.manual {
		requests[m.ID] = true
		s.ManualRuns++
		if m.State == "done" {
			s.Done++
		}
		if m.Attempts > 1 {
			s.TakenOver++
		}
		if m.RunID != 0 {
			if r, ok := runs[m.RunID]; !ok || r.Trigger != "manual" || r.Job != m.Job || r.Token != m.Token || r.Instance != m.Instance {
				k.violate(InvManual, "manual run %d of %s (%s, claimed by %s with token %d) names run %d, which is not a manual run of its claimer (%+v)",
					m.ID, m.Job, m.State, m.Instance, m.Token, m.RunID, r)
			}
		}
		if m.Job == JobProbe {
			k.checkExecutions(m, rows[m.ID])
		}
	}
	for _, id := range slices.Sorted(maps.Keys(rows)) {
		if !requests[id] {
			k.violate(InvManual, "%d probe row(s) name manual run %d, which no request is", len(rows[id]), id)
		}
	}
}

// checkExecutions checks the probe's rows written by manual run m.
func (k *checker) checkExecutions(m manualRun, rows []probeRow) {
	var who []string
	for _, r := range rows {
		who = append(who, fmt.Sprintf("row %d by %s with token %d at %s", r.ID, r.Instance, r.Token, r.Committed.Format("15:04:05.000")))
	}
	switch {
	case len(rows) > 1:
		k.violate(InvManual, "manual run %d of the probe executed %d times: %s", m.ID, len(rows), strings.Join(who, "; "))
	case len(rows) == 0 && m.State == "done":
		k.violate(InvManual, "manual run %d of the probe is done (by %s with token %d) but no run of it committed", m.ID, m.Instance, m.Token)
	case len(rows) == 1 && m.State != "done":
		k.violate(InvManual, "manual run %d of the probe committed its run (%s) but is %s", m.ID, who[0], m.State)
	case len(rows) == 1 && (rows[0].Instance != m.Instance || rows[0].Token != m.Token):
		k.violate(InvManual, "manual run %d of the probe is done by %s with token %d, but its run was %s", m.ID, m.Instance, m.Token, who[0])
	}
	for _, r := range rows {
		if r.Trigger != "manual" {
			k.violate(InvManual, "probe row %d names manual run %d but its trigger is %q", r.ID, m.ID, r.Trigger)
		}
	}
}

// controlsLine is the report's line on the operators' controls.
func (r *Report) controlsLine() string {
	c := r.Controls
	if c == nil {
		return ""
	}
	return fmt.Sprintf("Controls: %d pause(s) and %d drain(s) checked against %d terms, runs and transactions of writes; "+
		"%d manual run(s), %d done, %d claimed more than once; %d probe rows written by manual runs.\n",
		c.Pauses, c.Drains, c.Acts, c.ManualRuns, c.Done, c.TakenOver, c.Executed) + c.manualLine()
}

// uncheckedIn reports whether inv is one of the controls' invariants, which
// r, written before they were checked, lacks.
func uncheckedIn(r *Report, inv string) bool {
	switch inv {
	case InvPaused, InvManual, InvDrained:
		return r.Controls == nil
	case InvManualEffect:
		return r.Controls == nil || r.Controls.Manual == nil
	}
	return false
}
