package chaos

import (
	"strings"
	"testing"
	"time"
)

// With the harness's timing, the INSERT's answer of a partition-slow-db fault
// arrives after every deadline a term with the margin can have and before
// every deadline of a term without it, and the COMMIT it prompts lands after
// the old lease has expired at etcd and before PostgreSQL's idle timeout.
func TestTheSlowLinkAnswersBetweenTheTwoDeadlinesAndHoldsTheCommitPastTheSuccessor(t *testing.T) {
	for _, ttl := range []time.Duration{2 * time.Second, 4 * time.Second, 10 * time.Second} {
		o := Options{TTL: ttl}
		answer, after := o.slowLink()
		margin, renew := o.margin(), o.renewInterval()
		if latest := ttl - margin; answer <= latest {
			t.Errorf("TTL %v: the answer comes %v after the cut, not after the latest deadline with the margin (%v)", ttl, answer, latest)
		}
		if earliest := ttl - renew; answer >= earliest {
			t.Errorf("TTL %v: the answer comes %v after the cut, not before the earliest deadline without a margin (%v)", ttl, answer, earliest)
		}
		lands := answer + after
		if lands <= ttl+renew+time.Second {
			t.Errorf("TTL %v: the COMMIT lands %v after the cut, too soon after the old lease's expiry (%v) for a successor's write", ttl, lands, ttl)
		}
		if lands >= 3*ttl {
			t.Errorf("TTL %v: the COMMIT lands %v after the cut, past the fenced transaction's idle timeout (%v)", ttl, lands, 3*ttl)
		}
	}
}

// The operators' controls' faults report what their commands did: the
// pause's and the resume's effect, the manual runs' jobs, requests and
// strikes, the drains restarted; and none of them counts as a time without an acting
// leader but a drain of the probe's leader.
func TestTheControlsFaultsReportWhatTheirCommandsDid(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	rep := &Report{Jobs: []string{JobProbe, JobReport, JobCerts, JobAggregator}, Faults: []*Fault{
		{Kind: OperatorPause, Job: JobProbe, NoActing: ms(5000), Controls: &ControlFigures{Stopped: ms(40), Resumed: ms(30), Refused: true}},
		{Kind: OperatorPause, Job: JobAggregator, Controls: &ControlFigures{Stopped: ms(60), Resumed: ms(400)}},
		{Kind: ManualRun, Job: JobReport, Led: []string{JobProbe, JobReport}, NoActing: ms(3000),
			Controls: &ControlFigures{Commands: 3, Joined: 2, Requests: []int64{4}, Done: []time.Duration{ms(3300)}, Strike: "sigkill", StruckAt: struckAfter}},
		{Kind: ManualRun, Job: JobProbe, Controls: &ControlFigures{Commands: 2, Joined: 0, Requests: []int64{5, 6}, Done: []time.Duration{ms(200), ms(250)}}},
		{Kind: Drain, Led: []string{JobProbe}, NoActing: ms(1000), Controls: &ControlFigures{Restarted: true}},
	}}
	md := rep.Markdown()
	for _, want := range []string{
		"| operator-pause | 2 | – (0) | – | – | – | pause → term over 40ms / 60ms / 60ms; resume → new term 30ms / 400ms / 400ms; `run` of the paused job refused 1 of 1 (none asked of the continuous aggregator and script)",
		"| manual-run | 2 | – (0) | – | – | – | request → done 250ms / 3.3s / 3.3s; 5 concurrent `run --wait`, 2 joined an open request, 3 requests; " +
			"runs of probe 1, weekly-report 1; claimer struck: sigkill after its effect 1 |",
		"| drain | 1 | 1s / 1s / 1s (1) |",
		"restarted while drained: 1 |",
		"probe 1, weekly-report 0", // a drain strikes a leader; a manual run's strike is not counted there
		"| a paused job does nothing from a renew interval after its pause until its resume (not checked) | 0 |",
		"| " + InvManualEffect + " (not checked) | 0 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the report lacks %q:\n%s", want, md)
		}
	}
}
