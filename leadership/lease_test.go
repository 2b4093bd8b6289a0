package leadership

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// manualClock is a session clock the test moves by hand.
type manualClock struct{ now atomic.Int64 }

func (c *manualClock) Now() time.Duration { return time.Duration(c.now.Load()) }

// A store's news that the lease or a term's record is gone, arriving after
// the lease's deadline (a process resumed from a pause: the store's answer
// can beat the deadline's timer), is the expiry seen late and is said so;
// before the deadline it is what the store said.
func TestAStoresNewsOfALossAfterTheDeadlineIsTheExpirySeenLate(t *testing.T) {
	const ttl, margin = 10 * time.Second, 2 * time.Second
	for _, news := range []Reason{ReasonLeaseLost, ReasonKeyLost} {
		for _, late := range []bool{false, true} {
			c := &manualClock{}
			l := (&Session{cfg: Config{Margin: margin}, clock: newClock(c)}).newLease()
			l.Start(l.Now(), ttl)
			l.timer.Stop() // the test is the only one to end it
			if late {
				c.now.Add(int64(ttl - margin))
			}
			l.End(Ended(news, "the store says so"))
			got := ReasonOf(context.Cause(l.Context()))
			want := news
			if late {
				want = ReasonExpired
			}
			if got != want {
				t.Errorf("%s reported %v after the grant (deadline %v): the lease ended %q, want %q",
					news, time.Duration(c.now.Load()), ttl-margin, got, want)
			}
		}
	}
}
