package etcdlease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/peer"

	"github.com/snip/snip-jobs/leadership"
)

// A session renews its lease over one long-lived LeaseKeepAlive stream, one
// request per renew interval. (clientv3's KeepAliveOnce opens a stream per
// call, which etcd counts as a call ended by the client, "Unavailable"; with
// etcd's authentication, clientv3 also logs in for every new stream: a bcrypt
// check and a raft round on the member.) etcd answers the requests of a stream one at a
// time, in order, once each (or ends the stream); the session never has more
// than one request out on a stream, so every answer is the answer to the
// request whose send time the stream holds, and the deadline counts from that
// send time, as with one stream per request.
//
// A request that fails (the stream breaks: its member died, lost its leader or
// refused) or goes unanswered for longer than the patience (a member cut off
// or stalled) is abandoned with its stream and sent again at once on a new
// stream, which the client's balancer puts on the next member; further failures
// are retried at the retry pace until the lease ends. A request parked on a
// member while etcd elects a leader is answered as soon as there is one.

// sendReason says why a keep-alive was sent (for tests and logs).
type sendReason int

const (
	sendScheduled sendReason = iota // the renew interval came round
	sendAtOnce                      // the first retry after a failure, on a new stream
	sendPaced                       // a further retry, at the retry pace
)

// kaStream is one LeaseKeepAlive stream, served by its own goroutine (serve).
type kaStream struct {
	ctx    context.Context
	cancel context.CancelFunc
	send   chan struct{}          // a request to send (capacity 1)
	quit   chan struct{}          // closed to end the stream cleanly
	sentAt time.Time              // send time of the request out on it; zero: none (the keeper's goroutine only)
	sent   leadership.Instant     // the same, on the session's clock (the lease's deadline counts from it)
	member atomic.Pointer[string] // address of the member it reached, once open
}

// memberOf names the member a stream reached, for logs.
func (st *kaStream) memberOf() string {
	if m := st.member.Load(); m != nil {
		return *m
	}
	return "not connected"
}

// kaAnswer is a stream's answer to its request, or why it failed.
type kaAnswer struct {
	st   *kaStream
	resp *pb.LeaseKeepAliveResponse
	err  error
}

// keeper runs the keep-alives of one lease.
type keeper struct {
	h       *lease
	cur     *kaStream     // nil: the next send opens one
	answers chan kaAnswer // from the current stream's goroutine
	fails   int           // failures since the last acknowledged keep-alive
}

// patience is how long a keep-alive may stay unanswered before it is sent
// again on another stream: half a renew interval, and no less than a quarter
// of TTL − margin, so that a slow answer does not cost a new stream (and,
// with etcd's authentication, a login) at short intervals.
func (st *store) patience() time.Duration {
	return max(st.cfg.RenewInterval/2, (st.cfg.TTL-st.cfg.Margin)/4)
}

// retryPace is the time between retries after the first.
func (st *store) retryPace() time.Duration { return st.cfg.RenewInterval / 8 }

// KeepAlive renews the lease every RenewInterval until it ends, or ctx (the
// session) does.
func (h *lease) KeepAlive(ctx context.Context) *leadership.EndedError {
	st, l := h.st, h.l
	k := &keeper{h: h, answers: make(chan kaAnswer, 1)}
	defer k.drop(true)
	next, why := h.sentAt.Add(st.cfg.RenewInterval), sendScheduled
	for {
		wake := next
		if k.out() {
			wake = k.cur.sentAt.Add(st.patience())
		}
		timer := time.NewTimer(time.Until(wake))
		select {
		case <-ctx.Done():
			timer.Stop()
			return leadership.Ended(leadership.ReasonShutdown, "")
		case <-l.Context().Done():
			timer.Stop()
			var cause *leadership.EndedError
			errors.As(context.Cause(l.Context()), &cause)
			return cause
		case a := <-k.answers:
			timer.Stop()
			if a.st != k.cur || a.st.sentAt.IsZero() {
				continue // from a stream given up on
			}
			sentAt, sent := a.st.sentAt, a.st.sent
			a.st.sentAt = time.Time{}
			if err := a.check(h.id); err != nil {
				next, why = k.failed(err)
				continue
			}
			if a.resp.TTL <= 0 {
				l.End(leadership.Ended(leadership.ReasonLeaseLost, "etcd reports lease %x gone", int64(h.id)))
				continue
			}
			k.renewed(sent, a.resp)
			next, why = sentAt.Add(st.cfg.RenewInterval), sendScheduled
		case <-timer.C:
			now := time.Now()
			if k.out() {
				if now.Before(k.cur.sentAt.Add(st.patience())) {
					continue
				}
				next, why = k.failed(fmt.Errorf("no answer within %v", st.patience()))
			}
			switch {
			case l.Deadline().IsZero():
				l.CheckDeadline() // a reader saw the deadline pass: end the lease now
			case !now.Before(next):
				k.sendNow(now, why)
			}
		}
	}
}

// out reports whether a keep-alive is out on the current stream.
func (k *keeper) out() bool { return k.cur != nil && !k.cur.sentAt.IsZero() }

// check returns why a's answer cannot renew lease id, if it cannot.
func (a kaAnswer) check(id clientv3.LeaseID) error {
	switch {
	case a.err != nil:
		return a.err
	case a.resp.ID != int64(id):
		return fmt.Errorf("answer for lease %x on a stream renewing %x", a.resp.ID, int64(id))
	}
	return nil
}

// renewed applies an acknowledged keep-alive sent at sent (one answered
// after the deadline ends the lease instead).
func (k *keeper) renewed(sent leadership.Instant, resp *pb.LeaseKeepAliveResponse) {
	h := k.h
	if !h.l.Renewed(sent, time.Duration(resp.TTL)*time.Second) {
		return
	}
	if k.fails > 0 {
		h.st.log.Info("keep-alive acknowledged again", "lease", h.ID(), "failures", k.fails,
			"deadline_in", time.Until(h.l.Deadline()))
	}
	k.fails = 0
}

// failed gives up on the current stream after err and says when to send
// again: at once after the first failure (a new stream, on the next member),
// then at the retry pace.
func (k *keeper) failed(err error) (next time.Time, why sendReason) {
	h := k.h
	h.l.Failed()
	k.fails++
	member := k.cur.memberOf()
	k.drop(false)
	now := time.Now()
	level := slog.LevelDebug
	if k.fails == 1 {
		level = slog.LevelInfo
	}
	if h.l.Context().Err() == nil { // else the lease ended meanwhile (a resume past its deadline): its end says why
		h.st.log.Log(context.Background(), level, "keep-alive failed; retrying on a new stream",
			"lease", h.ID(), "member", member, "err", err, "failures", k.fails)
	}
	if k.fails == 1 {
		return now, sendAtOnce
	}
	return now.Add(h.st.retryPace()), sendPaced
}

// sendNow sends a keep-alive, on a new stream if there is none.
func (k *keeper) sendNow(now time.Time, why sendReason) {
	h := k.h
	if k.cur == nil {
		k.cur = k.open()
	}
	sent := h.l.Now()
	k.cur.sentAt, k.cur.sent = sent.Time(), sent
	h.l.Sent()
	if h.st.onKeepAlive != nil {
		h.st.onKeepAlive(why, sent.Time())
	}
	k.cur.send <- struct{}{}
}

// open starts a stream's goroutine; the stream itself is opened with its
// first request, on that goroutine, so that a member slow to accept it never
// holds up this loop (patience covers it).
func (k *keeper) open() *kaStream {
	ctx, cancel := context.WithCancel(context.Background())
	st := &kaStream{ctx: ctx, cancel: cancel, send: make(chan struct{}, 1), quit: make(chan struct{})}
	go k.serve(st)
	return st
}

// drop lets go of the current stream: cleanly (its requests all answered,
// the stream closed from our side, which etcd counts as OK), or at once.
func (k *keeper) drop(clean bool) {
	st := k.cur
	if st == nil {
		return
	}
	k.cur = nil
	if clean && st.sentAt.IsZero() {
		close(st.quit)
		return
	}
	st.cancel()
}

// closeWait bounds a clean close: the member's end of the stream.
const closeWait = 5 * time.Second

// serve runs one stream: it opens it with the first request, sends each
// request and passes its answer on, until the stream fails, is given up on or
// is closed.
func (k *keeper) serve(st *kaStream) {
	defer st.cancel()
	var stream pb.Lease_LeaseKeepAliveClient
	report := func(a kaAnswer) bool {
		select {
		case k.answers <- a:
			return a.err == nil
		case <-st.ctx.Done():
			return false
		}
	}
	for {
		select {
		case <-st.ctx.Done():
			return
		case <-st.quit:
			if stream != nil && stream.CloseSend() == nil {
				t := time.AfterFunc(closeWait, st.cancel)
				_, _ = stream.Recv() // io.EOF once etcd has ended its side
				t.Stop()
			}
			return
		case <-st.send:
		}
		var err error
		if stream == nil {
			stream, err = pb.NewLeaseClient(k.h.st.cfg.Client.ActiveConnection()).LeaseKeepAlive(st.ctx)
			if err != nil {
				report(kaAnswer{st: st, err: fmt.Errorf("open a keep-alive stream: %w", err)})
				return
			}
			if p, ok := peer.FromContext(stream.Context()); ok {
				m := p.Addr.String()
				st.member.Store(&m)
				k.h.st.kaMember.Store(&m)
			}
		}
		if err := stream.Send(&pb.LeaseKeepAliveRequest{ID: int64(k.h.id)}); err != nil {
			_, err = stream.Recv() // the stream's own error; Send says only io.EOF
			report(kaAnswer{st: st, err: fmt.Errorf("send a keep-alive: %w", err)})
			return
		}
		resp, err := stream.Recv()
		if !report(kaAnswer{st: st, resp: resp, err: err}) {
			return
		}
	}
}
