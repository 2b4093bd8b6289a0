package leadership

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

	"github.com/snip/snip-jobs/leadership/internal/deadline"
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
	sentAt int64                  // send time of the request out on it; -1: none (keepAlive's goroutine only)
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
	s       *Session
	l       *lease
	cur     *kaStream     // nil: the next send opens one
	answers chan kaAnswer // from the current stream's goroutine
	fails   int           // failures since the last acknowledged keep-alive
}

// patience is how long a keep-alive may stay unanswered before it is sent
// again on another stream: half a renew interval, and no less than a quarter
// of TTL − margin, so that a slow answer does not cost a new stream (and,
// with etcd's authentication, a login) at short intervals.
func (s *Session) patience() time.Duration {
	return max(s.cfg.RenewInterval/2, (s.cfg.TTL-s.cfg.Margin)/4)
}

// retryPace is the time between retries after the first.
func (s *Session) retryPace() time.Duration { return s.cfg.RenewInterval / 8 }

// keepAlive renews l every RenewInterval until the lease ends. It reports why
// it ended, and whether any keep-alive was acknowledged.
func (s *Session) keepAlive(l *lease) (cause *EndedError, renewed bool) {
	k := &keeper{s: s, l: l, answers: make(chan kaAnswer, 1)}
	defer k.drop(true)
	next, why := l.sentAt+int64(s.cfg.RenewInterval), sendScheduled
	for {
		wake := next
		if k.out() {
			wake = k.cur.sentAt + int64(s.patience())
		}
		timer := time.NewTimer(time.Duration(wake - s.now()))
		select {
		case <-s.ctx.Done():
			timer.Stop()
			return ended(ReasonShutdown, ""), renewed
		case <-l.ctx.Done():
			timer.Stop()
			var cause *EndedError
			errors.As(context.Cause(l.ctx), &cause)
			return cause, renewed
		case a := <-k.answers:
			timer.Stop()
			if a.st != k.cur || a.st.sentAt < 0 {
				continue // from a stream given up on
			}
			sentAt := a.st.sentAt
			a.st.sentAt = -1
			if err := a.check(l.id); err != nil {
				next, why = k.failed(err)
				continue
			}
			if a.resp.TTL <= 0 {
				return ended(ReasonLeaseLost, "etcd reports lease %x gone", int64(l.id)), renewed
			}
			if c := k.renewed(sentAt, a.resp); c != nil {
				return c, renewed
			}
			renewed = true
			next, why = sentAt+int64(s.cfg.RenewInterval), sendScheduled
		case <-timer.C:
			now := s.now()
			if k.out() {
				if now < k.cur.sentAt+int64(s.patience()) {
					continue
				}
				next, why = k.failed(fmt.Errorf("no answer within %v", s.patience()))
			}
			switch {
			case l.dl.Load() == deadline.Dead:
				s.checkDeadline(l) // a reader saw the deadline pass: end the lease now
			case now >= next:
				k.sendNow(now, why)
			}
		}
	}
}

// out reports whether a keep-alive is out on the current stream.
func (k *keeper) out() bool { return k.cur != nil && k.cur.sentAt >= 0 }

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

// renewed applies an acknowledged keep-alive sent at sentAt; a non-nil cause
// means the lease ends (acknowledged after its deadline).
func (k *keeper) renewed(sentAt int64, resp *pb.LeaseKeepAliveResponse) *EndedError {
	s, l := k.s, k.l
	now := s.now()
	nd, ok := l.dl.Renew(sentAt, time.Duration(resp.TTL)*time.Second, s.cfg.Margin, now)
	if !ok {
		return ended(ReasonExpired, "keep-alive acknowledged after the deadline")
	}
	if k.fails > 0 {
		s.log.Info("keep-alive acknowledged again", "lease", int64(l.id), "failures", k.fails,
			"deadline_in", time.Duration(nd-now))
	}
	k.fails = 0
	l.lastDeadline.Store(nd)
	s.stats.changed.Notify() // LastRenewal
	l.timer.Reset(time.Duration(nd - now))
	return nil
}

// failed gives up on the current stream after err and says when to send
// again: at once after the first failure (a new stream, on the next member),
// then at the retry pace.
func (k *keeper) failed(err error) (next int64, why sendReason) {
	s := k.s
	s.stats.add(&s.stats.keepAliveFailures, 1)
	k.fails++
	member := k.cur.memberOf()
	k.drop(false)
	now := s.now()
	level := slog.LevelDebug
	if k.fails == 1 {
		level = slog.LevelInfo
	}
	s.log.Log(context.Background(), level, "keep-alive failed; retrying on a new stream",
		"lease", int64(k.l.id), "member", member, "err", err, "failures", k.fails)
	if k.fails == 1 {
		return now, sendAtOnce
	}
	return now + int64(s.retryPace()), sendPaced
}

// sendNow sends a keep-alive, on a new stream if there is none.
func (k *keeper) sendNow(now int64, why sendReason) {
	s := k.s
	if k.cur == nil {
		k.cur = k.open()
	}
	k.cur.sentAt = now
	s.stats.add(&s.stats.keepAlivesSent, 1)
	if s.onKeepAlive != nil {
		s.onKeepAlive(why, s.at(now))
	}
	k.cur.send <- struct{}{}
}

// open starts a stream's goroutine; the stream itself is opened with its
// first request, on that goroutine, so that a member slow to accept it never
// holds up this loop (patience covers it).
func (k *keeper) open() *kaStream {
	ctx, cancel := context.WithCancel(context.Background())
	st := &kaStream{ctx: ctx, cancel: cancel, send: make(chan struct{}, 1), quit: make(chan struct{}), sentAt: -1}
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
	if clean && st.sentAt < 0 {
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
			stream, err = pb.NewLeaseClient(k.s.cfg.Client.ActiveConnection()).LeaseKeepAlive(st.ctx)
			if err != nil {
				report(kaAnswer{st: st, err: fmt.Errorf("open a keep-alive stream: %w", err)})
				return
			}
			if p, ok := peer.FromContext(stream.Context()); ok {
				m := p.Addr.String()
				st.member.Store(&m)
				k.s.kaMember.Store(&m)
			}
		}
		if err := stream.Send(&pb.LeaseKeepAliveRequest{ID: int64(k.l.id)}); err != nil {
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
