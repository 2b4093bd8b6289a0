package chaos

import (
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
