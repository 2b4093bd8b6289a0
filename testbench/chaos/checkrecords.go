package chaos

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/snip/snip-jobs/testbench/exectest"
)

// The records operators read (job_terms, and job_runs through its copy
// chaos_runs), checked against the fence's discipline: a term's run is
// recorded only within its term, a singleton's ok runs never overlap, and
// no run of a term that has a successor is left open (InvRunInTerm,
// InvOKOverlap, InvRunClosed). Only the runs of terms are checked (a
// database-mode claim's token is not a term's), and, in a rolling upgrade,
// only the runs of the new binary: the previous release wrote its records
// without these rules (migration 0016).

// termSpan is one term's recorded span: from its start to the earlier of its
// recorded end and its successor's start (zero End: neither, it runs on).
type termSpan struct {
	jobTerm
	End  time.Time
	Next *jobTerm // the successor, if any
}

// spans indexes the recorded terms by job and token.
func spans(terms []jobTerm) map[string]map[int64]termSpan {
	byJob := map[string][]jobTerm{}
	for _, t := range terms {
		byJob[t.Job] = append(byJob[t.Job], t)
	}
	out := map[string]map[int64]termSpan{}
	for job, ts := range byJob {
		slices.SortFunc(ts, func(a, b jobTerm) int { return cmp.Compare(a.Token, b.Token) })
		out[job] = map[int64]termSpan{}
		for i, t := range ts {
			s := termSpan{jobTerm: t}
			if t.Ended != nil {
				s.End = *t.Ended
			}
			if i+1 < len(ts) {
				s.Next = &ts[i+1]
				if s.End.IsZero() || s.Next.Started.Before(s.End) {
					s.End = s.Next.Started
				}
			}
			out[job][t.Token] = s
		}
	}
	return out
}

// checkRecords checks the records of terms and runs; upgraded says when
// each instance began running the binary under test (zero: from the start).
// asOf is the database's clock when the records were read.
func (k *checker) checkRecords(f *facts, upgraded map[string]time.Time, asOf time.Time) {
	terms := spans(f.jobTerms)
	byJob := map[string][]runRow{}
	for _, r := range f.ctl.runs {
		span, ok := terms[r.Job][r.Token]
		if !ok || r.Started.Before(upgraded[r.Instance]) {
			continue
		}
		byJob[r.Job] = append(byJob[r.Job], r)
		if !span.End.IsZero() && r.Started.After(span.End) {
			k.violate(InvRunInTerm, "run %d of %s (token %d) by %s began at %s, after its term had ended (%s)",
				r.ID, r.Job, r.Token, r.Instance, clock(r.Started), clock(span.End))
		}
		if r.Finished == nil && span.Next != nil && asOf.Sub(span.Next.Started) > k.ttl {
			k.violate(InvRunClosed, "run %d of %s (token %d) by %s is still open, %v after token %d's term began",
				r.ID, r.Job, r.Token, r.Instance, asOf.Sub(span.Next.Started).Round(time.Millisecond), span.Next.Token)
		}
	}
	for _, runs := range byJob {
		k.checkOKOverlap(runs)
	}
}

// checkOKOverlap: of one job's runs, those recorded ok never overlap.
func (k *checker) checkOKOverlap(runs []runRow) {
	var ok []runRow
	for _, r := range runs {
		if r.Result == "ok" && r.Finished != nil {
			ok = append(ok, r)
		}
	}
	slices.SortFunc(ok, func(a, b runRow) int { return a.Started.Compare(b.Started) })
	var last runRow // the one that finished last so far
	for i, r := range ok {
		if i > 0 && r.Started.Before(*last.Finished) {
			k.violate(InvOKOverlap, "runs %d (token %d, %s, %s–%s) and %d (token %d, %s, from %s) of %s are both ok and overlap",
				last.ID, last.Token, last.Instance, clock(last.Started), clock(*last.Finished), r.ID, r.Token, r.Instance, clock(r.Started), r.Job)
		}
		if i == 0 || r.Finished.After(*last.Finished) {
			last = r
		}
	}
}

// clock is an instant as the reports print it.
func clock(t time.Time) string { return t.Format("15:04:05.000") }

// checkPrograms checks the exec job's programs (package exectest's records
// in dir; "" when the run had no exec job): no start found a process of an
// earlier run alive, and none is alive now that every instance stopped.
func (k *checker) checkPrograms(dir string) error {
	if dir == "" {
		return nil
	}
	overlaps, err := exectest.Overlaps(dir)
	if err != nil {
		return fmt.Errorf("read the programs' overlaps: %w", err)
	}
	for _, o := range overlaps {
		k.violate(InvProgramOverlap, "a program started while process %s (pid, its run's records, its state) of an earlier run was alive", o)
	}
	alive, err := exectest.Alive(dir)
	if err != nil {
		return fmt.Errorf("read the programs' processes: %w", err)
	}
	for _, pid := range alive {
		k.violate(InvProgramLeft, "process %s of a program is alive after every instance stopped", pid)
	}
	return nil
}
