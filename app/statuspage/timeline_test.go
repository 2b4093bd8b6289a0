package statuspage

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/snip/snip-jobs/scheduler/status"
)

// t0 is the left edge of a five-minute window; now is its right edge.
var (
	t0  = time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)
	now = t0.Add(5 * time.Minute)
)

func at(d time.Duration) time.Time { return t0.Add(d) }

// snap is a snapshot of one leader-mode job, "pulse", and the given history;
// leader is the token etcd names the leader now (0: none).
func snap(leader int64, terms ...status.TermRecord) Snapshot {
	s := Snapshot{Instance: "server-1", Now: now, LocalNow: now, WindowSeconds: 300, LeadersKnown: true,
		Jobs: []status.Job{{Name: "pulse", Type: "sql", Singleton: true, Mode: "leader"}}, Terms: terms}
	if leader != 0 {
		s.Jobs[0].Leader = &status.Leader{Token: leader}
	}
	return s
}

func term(token int64, instance string, start, end time.Duration) status.TermRecord {
	t := status.TermRecord{Job: "pulse", Token: token, Instance: instance, Started: at(start)}
	if end >= 0 {
		t.Ended = at(end)
	}
	return t
}

const open = -1 // term(..., open): no end recorded

func lane(t *testing.T, tl Timeline, job string) Lane {
	t.Helper()
	for _, l := range tl.Lanes {
		if l.Job == job {
			return l
		}
	}
	t.Fatalf("no lane for %s in %+v", job, tl.Lanes)
	return Lane{}
}

func near(a, b float64) bool { return math.Abs(a-b) < 0.01 }

// xOf is where instant t is drawn.
func xOf(tl Timeline, t time.Time) float64 {
	return tl.PlotX + float64(t.Sub(tl.From))/float64(tl.To.Sub(tl.From))*tl.PlotW
}

func TestTimelineDrawsEachTermFromItsStartToItsEndAndTheGapsBetween(t *testing.T) {
	tl := Layout(snap(30,
		term(10, "server-a", 10*time.Second, 60*time.Second),
		term(20, "server-b", 60*time.Second+2*time.Millisecond, 120*time.Second),
		term(30, "server-c", 140*time.Second, open),
	))
	l := lane(t, tl, "pulse")
	if len(l.Terms) != 3 {
		t.Fatalf("%d terms drawn, want 3: %+v", len(l.Terms), l.Terms)
	}
	a, b, c := l.Terms[0], l.Terms[1], l.Terms[2]
	if a.State != Ended || !a.End.Equal(at(60*time.Second)) || !near(a.X, xOf(tl, at(10*time.Second))) || !near(a.X+a.W, xOf(tl, at(60*time.Second))) {
		t.Errorf("first term: %+v; want ended, drawn from 10s to 60s", a)
	}
	if a.Color == b.Color || b.Color == c.Color || a.Color == c.Color {
		t.Errorf("instances share colours: %s %s %s", a.Color, b.Color, c.Color)
	}
	if c.State != Ongoing || !c.End.Equal(now) || !near(c.X+c.W, tl.PlotX+tl.PlotW) {
		t.Errorf("last term: %+v; want ongoing up to now, the right edge", c)
	}
	// A resign hand-over leaves 2 ms without a leader, a crash longer.
	if len(l.Gaps) != 2 {
		t.Fatalf("gaps %+v, want 2", l.Gaps)
	}
	if g := l.Gaps[0]; !g.Start.Equal(a.End) || !g.End.Equal(b.Start) || g.End.Sub(g.Start) != 2*time.Millisecond || g.Now {
		t.Errorf("gap after the first term: %+v", g)
	}
	if g := l.Gaps[1]; !g.Start.Equal(at(120*time.Second)) || !g.End.Equal(at(140*time.Second)) || g.Label != "no leader 20s" {
		t.Errorf("gap after the second term: %+v; want 120s to 140s labelled with its length", g)
	}
	if b.Label != "#20 server-b" {
		t.Errorf("a wide bar is labelled %q, want its token and instance", b.Label)
	}
}

func TestTimelineDrawsATermThatNeverClosedUpToItsSuccessorsStart(t *testing.T) {
	// server-a was killed: its end was never recorded; server-b won once its
	// lease expired.
	tl := Layout(snap(20,
		term(10, "server-a", 10*time.Second, open),
		term(20, "server-b", 70*time.Second, open),
	))
	l := lane(t, tl, "pulse")
	a, b := l.Terms[0], l.Terms[1]
	if a.State != Unclosed || !a.End.Equal(b.Start) || !near(a.X+a.W, b.X) {
		t.Errorf("dead instance's term: %+v; want unclosed, ending where token 20 starts (%v)", a, b.Start)
	}
	if b.State != Ongoing {
		t.Errorf("successor: %+v; want ongoing", b)
	}
	if len(l.Gaps) != 0 {
		t.Errorf("gaps %+v; a term bounded by its successor leaves none", l.Gaps)
	}
}

func TestTimelineCutsAnEndRecordedAfterTheSuccessorsStartAndDrawsTheRestAsATail(t *testing.T) {
	// server-a was paused (SIGSTOP) at 50s; server-b won at 58s; server-a woke
	// at 90s and only then recorded the end of its term.
	tl := Layout(snap(20,
		term(10, "server-a", 10*time.Second, 90*time.Second),
		term(20, "server-b", 58*time.Second, open),
	))
	a := lane(t, tl, "pulse").Terms[0]
	if a.State != Ended || !a.End.Equal(at(58*time.Second)) || !a.LateEnd.Equal(at(90*time.Second)) {
		t.Fatalf("paused term: %+v; want drawn to 58s with a late end at 90s", a)
	}
	if !near(a.TailX, xOf(tl, at(58*time.Second))) || !near(a.TailX+a.TailW, xOf(tl, at(90*time.Second))) {
		t.Errorf("tail from %.1f, width %.1f; want from 58s to 90s", a.TailX, a.TailW)
	}
}

func TestTimelineShowsNoLeaderFromTheLastEndUntilNow(t *testing.T) {
	tl := Layout(snap(0, term(10, "server-a", 10*time.Second, 200*time.Second)))
	l := lane(t, tl, "pulse")
	if len(l.Gaps) != 1 || !l.Gaps[0].Now || !l.Gaps[0].Start.Equal(at(200*time.Second)) || !l.Gaps[0].End.Equal(now) {
		t.Fatalf("gaps %+v; want one from 200s until now", l.Gaps)
	}
}

func TestTimelineTellsAnOngoingTermFromALostOne(t *testing.T) {
	// Open, no successor, and etcd names another token (or none): lost.
	for _, leader := range []int64{0, 99} {
		if b := lane(t, Layout(snap(leader, term(10, "server-a", 10*time.Second, open))), "pulse").Terms[0]; b.State != Lost || !b.End.Equal(now) {
			t.Errorf("etcd leader %d: %+v; want lost, drawn up to now", leader, b)
		}
	}
	// etcd could not be read: an open term is taken to be ongoing.
	s := snap(0, term(10, "server-a", 10*time.Second, open))
	s.LeadersKnown = false
	if b := lane(t, Layout(s), "pulse").Terms[0]; b.State != Ongoing {
		t.Errorf("leaders unknown: %+v; want ongoing", b)
	}
}

func TestTimelineClipsTermsToTheWindowAndCallsNothingBeforeTheFirstTermAGap(t *testing.T) {
	tl := Layout(snap(20,
		term(10, "server-a", -time.Hour, 100*time.Second),
		term(20, "server-a", 100*time.Second+time.Millisecond, open),
	))
	l := lane(t, tl, "pulse")
	if a := l.Terms[0]; !a.ClippedLeft || !near(a.X, tl.PlotX) {
		t.Errorf("term started an hour ago: %+v; want clipped at the left edge", a)
	}
	empty := Layout(snap(20, term(20, "server-a", 100*time.Second, open)))
	if gaps := lane(t, empty, "pulse").Gaps; len(gaps) != 0 {
		t.Errorf("gaps %+v before the first recorded term; want none (the history may start there)", gaps)
	}
	none := Layout(snap(0))
	if l := lane(t, none, "pulse"); !l.Empty || len(l.Terms) != 0 {
		t.Errorf("a job with no term: %+v; want an empty lane", l)
	}
}

func TestTimelineMarksRefusedWritesOnTheLaneOfTheStaleTerm(t *testing.T) {
	s := snap(20,
		term(10, "server-a", 10*time.Second, 90*time.Second),
		term(20, "server-b", 58*time.Second, open),
	)
	s.Rejections = []status.Rejection{
		{Resource: "pulse-rows", Token: 10, Current: 20, Instance: "server-a", At: at(89 * time.Second)}, // by token
		{Resource: "pulse", Token: 7, Current: 20, Instance: "server-c", At: at(95 * time.Second)},       // by resource
		{Resource: "elsewhere", Token: 5, Current: 6, Instance: "server-c", At: at(96 * time.Second)},    // neither
	}
	tl := Layout(s)
	marks := lane(t, tl, "pulse").Rejections
	if len(marks) != 2 || marks[0].Token != 10 || !near(marks[0].X, xOf(tl, at(89*time.Second))) || marks[1].Token != 7 {
		t.Fatalf("marks on pulse: %+v; want tokens 10 (at 89s) and 7", marks)
	}
	if marks[0].Title == "" {
		t.Error("a refused write has no tooltip")
	}
	if len(tl.Unplaced) != 1 || tl.Unplaced[0].Resource != "elsewhere" {
		t.Errorf("unplaced %+v; want the write to \"elsewhere\"", tl.Unplaced)
	}
}

func TestTimelineHasALaneForEachLeaderModeJobInConfigOrderThenJobsOnlyTheHistoryNames(t *testing.T) {
	s := Snapshot{Now: now, WindowSeconds: 300, LeadersKnown: true, Jobs: []status.Job{
		{Name: "weekly-report", Mode: "leader"},
		{Name: "prune", Mode: "everywhere"},
		{Name: "nightly", Mode: "database"},
		{Name: "aggregator", Mode: "leader"},
	}, Terms: []status.TermRecord{{Job: "retired-job", Token: 3, Instance: "server-a", Started: at(time.Second), Ended: at(2 * time.Second)}}}
	tl := Layout(s)
	var jobs []string
	for _, l := range tl.Lanes {
		jobs = append(jobs, l.Job)
	}
	if want := []string{"weekly-report", "aggregator", "retired-job"}; !equal(jobs, want) {
		t.Errorf("lanes %v, want %v", jobs, want)
	}
}

func TestTimelineAxisEndsAtNowWithAtMostElevenTicks(t *testing.T) {
	tl := Layout(snap(0))
	if n := len(tl.Ticks); n != 11 {
		t.Fatalf("%d ticks over 5m, want 11 (every 30s)", n)
	}
	first, last := tl.Ticks[0], tl.Ticks[len(tl.Ticks)-1]
	if first.Label != "now" || !near(first.X, tl.PlotX+tl.PlotW) || last.Label != "-5m" || !near(last.X, tl.PlotX) {
		t.Errorf("ticks from %+v to %+v; want now at the right edge, -5m at the left", first, last)
	}
	if tl.Ticks[3].Label != "-1m30s" {
		t.Errorf("fourth tick %q, want -1m30s", tl.Ticks[3].Label)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// The tooltip of a term says why it ended: the recorded reason in words, or
// the dev supervisor's word where the instance could record nothing (killed).
func TestTimelineSaysWhyEachTermEndedOnHover(t *testing.T) {
	s := snap(30,
		term(10, "server-a", 10*time.Second, 60*time.Second),
		term(20, "server-b", 60*time.Second, open),
		term(30, "server-c", 130*time.Second, open),
	)
	s.Terms[0].Reason = "rebalance"
	s.Dev = &DevState{Ends: []DevEnd{{Job: "pulse", Token: 20, Reason: "server-b was killed by SIGKILL: its lease expired"}}}
	bars := lane(t, Layout(s), "pulse").Terms
	for i, want := range []string{
		"ended: handed over to spread the singletons (rebalance)",
		"ended: server-b was killed by SIGKILL: its lease expired; its end was never recorded",
		"leading now",
	} {
		if !strings.Contains(bars[i].Title, want) {
			t.Errorf("term %d's tooltip %q lacks %q", bars[i].Token, bars[i].Title, want)
		}
	}
	if strings.Contains(bars[2].Title, "ended") {
		t.Errorf("the ongoing term's tooltip says it ended: %q", bars[2].Title)
	}
}

// Without ?window=, the page draws the history's age rounded up to a step
// (at most the default), so that a young cluster fills the width.
func TestTheDefaultWindowFitsTheHistorysAge(t *testing.T) {
	for _, c := range []struct {
		age  time.Duration // of the oldest term
		want time.Duration
	}{
		{20 * time.Second, 30 * time.Second},
		{40 * time.Second, time.Minute},
		{100 * time.Second, 2 * time.Minute},
		{200 * time.Second, 5 * time.Minute},
		{2 * time.Hour, 5 * time.Minute}, // an old term still running
	} {
		s := snap(2, term(1, "server-a", 5*time.Minute-c.age, 5*time.Minute-c.age+time.Second), term(2, "server-b", 5*time.Minute-5*time.Second, open))
		if got := FitWindow(s); got != c.want {
			t.Errorf("history %v old: window %v, want %v", c.age, got, c.want)
		}
	}
	if got := FitWindow(snap(0)); got != DefaultWindow {
		t.Errorf("no history: window %v, want %v", got, DefaultWindow)
	}
}
