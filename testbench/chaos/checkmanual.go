package chaos

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// The manual runs of the weekly report and the renewer, checked
// (InvManualEffect): each completes its request in the transaction that
// records its effect, so that a claimer that dies after that commit leaves
// nothing for its successor to run again. Their effects, as the jobs' own
// tables record them:
//
//   - the weekly report: a week's report stored (weekly_reports, logged in
//     chaos_writes) by a transaction that completed no cron slot. A manual
//     run reports the last whole week, which the schedule's slots usually
//     have stored already: such a run stores nothing, and only its record
//     in job_runs (ok: its one transaction committed) shows that it ran;
//   - the renewer: its pass ended (certrenew_terms set idle by the term,
//     logged in chaos_pass_ends). A pass that failed ends without completing
//     the request (the scheduler records it failed); one whose end did not
//     make it leaves the request to the scheduler, which completes it after
//     the run: such a pass is not recorded as ended, and a second pass of
//     the request is then allowed.
//
// Each manual run (job_runs, trigger manual) is the run of the request its
// term claimed last before it began (chaos_manual: a term claims, then
// runs), and its effect is its term's first that began from its start
// until the term's next run began (a term's runs take turns): a later one
// is a run whose start went unrecorded, and is left out.

// effectJobs are the jobs InvManualEffect covers; the probe's manual runs
// are checkExecutions'.
var effectJobs = []string{JobReport, JobCerts}

// ManualJobStats is what InvManualEffect checked of one job's manual runs.
type ManualJobStats struct {
	Job      string
	Requests int
	Runs     int // manual runs recorded (job_runs)
	// Executed is the requests that took effect: a run of theirs stored a
	// report or ended its pass, or was recorded ok (the weekly report).
	Executed int
	// Effects is the reports stored or passes ended by manual runs;
	// WithCompletion those committed in the transaction that completed their
	// request.
	Effects, WithCompletion int
}

// effect is a transaction that recorded what a run did.
type effect struct {
	What  string
	Xact  string
	Began time.Time
}

// manualExec is one manual run of a request, with its effect (if any).
type manualExec struct {
	run    runRow
	effect *effect
}

func (e manualExec) String() string {
	r := e.run
	s := fmt.Sprintf("run %d by %s (token %d, ", r.ID, r.Instance, r.Token)
	switch {
	case r.Result != "":
		s += "recorded " + r.Result
	case r.Finished == nil:
		s += "no end recorded"
	default:
		s += "ended, no result"
	}
	if e.effect != nil {
		s += fmt.Sprintf("; %s in transaction %s", e.effect.What, e.effect.Xact)
	}
	return s + ")"
}

// effects returns the effects of the effect jobs' runs, per term, in the
// order their transactions began.
func (f *facts) effects() map[termKey][]effect {
	out := map[termKey][]effect{}
	slotTx := map[string]bool{}
	for _, w := range f.writes {
		if w.Job == JobReport && w.Table == "cron_slots" {
			slotTx[w.Xact] = true
		}
	}
	for _, w := range f.writes {
		if w.Job == JobReport && w.Table == "weekly_reports" && w.Op == "INSERT" && !slotTx[w.Xact] {
			k := termKey{w.Job, w.Token}
			out[k] = append(out[k], effect{What: "stored a week's report", Xact: w.Xact, Began: w.Began})
		}
	}
	for _, p := range f.ctl.passEnds {
		if p.Job == JobCerts {
			k := termKey{p.Job, p.Token}
			out[k] = append(out[k], effect{What: "ended its pass", Xact: p.Xact, Began: p.Began})
		}
	}
	for _, es := range out {
		slices.SortStableFunc(es, func(a, b effect) int { return a.Began.Compare(b.Began) })
	}
	return out
}

// manualExecs groups the effect jobs' manual runs by the request each ran.
func (k *checker) manualExecs(f *facts) map[int64][]manualExec {
	claims := map[termKey][]manualChange{} // in commit order
	for _, c := range f.ctl.changes {
		if c.State == "running" {
			claims[termKey{c.Job, c.Token}] = append(claims[termKey{c.Job, c.Token}], c)
		}
	}
	runs := map[termKey][]runRow{}
	for _, r := range f.ctl.runs {
		if slices.Contains(effectJobs, r.Job) {
			runs[termKey{r.Job, r.Token}] = append(runs[termKey{r.Job, r.Token}], r)
		}
	}
	effects := f.effects()
	out := map[int64][]manualExec{}
	for key, rs := range runs {
		slices.SortStableFunc(rs, func(a, b runRow) int { return cmp.Or(a.Started.Compare(b.Started), cmp.Compare(a.ID, b.ID)) })
		for i, r := range rs {
			if r.Trigger != "manual" {
				continue
			}
			id := claimedBefore(claims[key], r.Started)
			if id == 0 {
				k.violate(InvManualEffect, "run %d of %s (manual, token %d) by %s began at %s, and its term had claimed no request before",
					r.ID, r.Job, r.Token, r.Instance, r.Started.Format("15:04:05.000"))
				continue
			}
			e := manualExec{run: r}
			for _, ef := range effects[key] {
				if !ef.Began.Before(r.Started) && (i+1 == len(rs) || ef.Began.Before(rs[i+1].Started)) {
					e.effect = &ef
					break
				}
			}
			out[id] = append(out[id], e)
		}
	}
	for _, es := range out { // the terms were visited in map order
		slices.SortFunc(es, func(a, b manualExec) int { return cmp.Compare(a.run.ID, b.run.ID) })
	}
	return out
}

// claimedBefore is the request of the latest of a term's claims committed
// before t (0: none).
func claimedBefore(claims []manualChange, t time.Time) int64 {
	var id int64
	for _, c := range claims {
		if c.Committed.Before(t) {
			id = c.ID
		}
	}
	return id
}

// checkEffects checks the manual runs of the weekly report and the renewer:
// each request took effect once at most, and each effect of a manual run was
// committed by the transaction that completed its request.
func (k *checker) checkEffects(f *facts, s *ControlStats) {
	execs := k.manualExecs(f)
	ends := map[int64]manualChange{} // each request's completion
	for _, c := range f.ctl.changes {
		if c.State == "done" || c.State == "failed" {
			ends[c.ID] = c
		}
	}
	stats := map[string]*ManualJobStats{}
	for _, job := range effectJobs {
		stats[job] = &ManualJobStats{Job: job}
	}
	for _, m := range f.ctl.manual {
		if js := stats[m.Job]; js != nil {
			k.checkOnce(m, ends[m.ID], execs[m.ID], js)
		}
	}
	for _, job := range effectJobs {
		s.Manual = append(s.Manual, *stats[job])
	}
}

// checkOnce checks request m's runs against its completion, end.
func (k *checker) checkOnce(m manualRun, end manualChange, execs []manualExec, js *ManualJobStats) {
	js.Requests++
	var took []string
	for _, e := range execs {
		js.Runs++
		ok := e.run.Result == "ok" && (m.Job == JobReport || e.effect != nil)
		if ef := e.effect; ef != nil {
			js.Effects++
			switch {
			case end.State == "done" && ef.Xact == end.Xact:
				js.WithCompletion++
				ok = true
			case m.Job == JobReport || e.run.Result == "ok": // a failed pass ends without completing
				k.violate(InvManualEffect, "manual run %d of %s: %s; %s", m.ID, m.Job, e, completion(m, end))
			}
		}
		if ok {
			took = append(took, e.String())
		}
	}
	if len(took) > 0 {
		js.Executed++
	}
	if len(took) > 1 {
		k.violate(InvManualEffect, "manual run %d of %s took effect %d times: %s", m.ID, m.Job, len(took), strings.Join(took, "; "))
	}
}

// completion says how request m was completed, if at all.
func completion(m manualRun, end manualChange) string {
	if end.State == "" {
		return fmt.Sprintf("the request was not completed (it is %s)", m.State)
	}
	return fmt.Sprintf("the request was completed (%s, token %d) in transaction %s, another", end.State, end.Token, end.Xact)
}

// manualLine is the report's line on InvManualEffect's checks.
func (c *ControlStats) manualLine() string {
	var parts []string
	for _, j := range c.Manual {
		what := "report(s) stored"
		if j.Job == JobCerts {
			what = "pass(es) ended"
		}
		parts = append(parts, fmt.Sprintf("%s %d request(s), %d run(s), %d took effect, %d %s by them (%d in the transaction that completed the request)",
			j.Job, j.Requests, j.Runs, j.Executed, j.Effects, what, j.WithCompletion))
	}
	if len(parts) == 0 {
		return ""
	}
	return "Manual runs checked against their effects: " + strings.Join(parts, "; ") + ".\n"
}
