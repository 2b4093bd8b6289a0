package leadership

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/snip/snip-jobs/internal/sleep"
)

// ErrBusy is returned by Campaign when this session already campaigns for, or
// leads, the job: a process holds at most one term per job.
var ErrBusy = errors.New("leadership: this session already campaigns for or leads the job")

// CampaignOption adjusts one Campaign.
type CampaignOption func(*campaignOptions)

type campaignOptions struct {
	holdback func() time.Duration
}

// WithHoldback makes the campaign wait f() before every attempt to create the
// key (the first, and each after the holder goes). A scheduler spreading
// singletons over instances returns a short delay while this instance already
// leads its fair share, so that instances with fewer terms win first.
func WithHoldback(f func() time.Duration) CampaignOption {
	return func(o *campaignOptions) { o.holdback = f }
}

// Holdback is the wait that WithHoldback set among opts, or nil: for a
// backend other than this package's Session to honour the same options.
func Holdback(opts ...CampaignOption) func() time.Duration {
	var o campaignOptions
	for _, opt := range opts {
		opt(&o)
	}
	return o.holdback
}

// LeaderRecord is the value of a leader key.
type LeaderRecord struct {
	Instance string    `json:"instance"`
	Host     string    `json:"host"`
	PID      int       `json:"pid"`
	Since    time.Time `json:"since"` // wall clock when the term was won, for people
}

// Campaign blocks until this session wins job's election, ctx is done, or the
// session closes. Winning is a create-if-absent of the leader key on the session's
// current lease; while another holder has it, Campaign watches the key and tries
// again when it is deleted (and, in case a watch event is missed, every 3×TTL).
//
// The term returned is attached to the lease that was live when the key was
// created, and was checked to be before that lease's deadline after etcd
// answered: a campaign that waited through a lease's end continues on the next
// lease and never returns a term of the old one.
func (s *Session) Campaign(ctx context.Context, job string, opts ...CampaignOption) (*Term, error) {
	if err := checkName("job", job); err != nil {
		return nil, err
	}
	var o campaignOptions
	for _, opt := range opts {
		opt(&o)
	}
	s.mu.Lock()
	if b := s.busyJobs[job]; b != nil && (b.term == nil || b.term.Err() == nil) {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: %s", ErrBusy, job)
	}
	slot := &busySlot{}
	s.busyJobs[job] = slot
	s.mu.Unlock()

	t, err := s.campaign(ctx, job, o)
	if err != nil {
		s.release(job, slot)
		return nil, err
	}
	s.mu.Lock()
	slot.term = t.ctx
	s.mu.Unlock()
	context.AfterFunc(t.ctx, func() { s.release(job, slot) })
	return t, nil
}

// busySlot is a job's place in Session.busyJobs: a campaign in progress
// (term nil) or the context of the term it won. A term whose context is done
// no longer holds the job, even before release has run: release runs on its
// own goroutine after the context ends, and a Campaign made as soon as Resign
// returns must not be refused for it.
type busySlot struct {
	term context.Context
}

// release frees job unless another campaign has taken its place since.
func (s *Session) release(job string, slot *busySlot) {
	s.mu.Lock()
	if s.busyJobs[job] == slot {
		delete(s.busyJobs, job)
	}
	s.mu.Unlock()
}

func (s *Session) campaign(ctx context.Context, job string, o campaignOptions) (*Term, error) {
	key := s.leaderKey(job)
	log := s.log.With("job", job)
	for {
		if o.holdback != nil {
			if d := o.holdback(); d > 0 {
				sleep.For(ctx, d)
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
			}
		}
		l, err := s.waitLease(ctx)
		if err != nil {
			return nil, err
		}
		t, holderRev, err := s.tryAcquire(ctx, l, job, key)
		switch {
		case t != nil:
			return t, nil
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case err != nil:
			log.Debug("campaign attempt failed; retrying", "err", err)
			sleep.For(ctx, s.cfg.RenewInterval/4)
		case holderRev > 0:
			s.waitForDelete(ctx, key, holderRev)
		}
	}
}

// tryAcquire makes one create-if-absent attempt on lease l. It returns the term
// on success; else the revision at which another holder was seen (to watch from),
// or an error.
func (s *Session) tryAcquire(ctx context.Context, l *lease, job, key string) (*Term, int64, error) {
	// The request ends with the campaign, the lease, or a timeout, whichever is first.
	rctx, cancel := context.WithTimeout(ctx, s.cfg.TTL)
	defer cancel()
	stop := context.AfterFunc(l.ctx, cancel)
	defer stop()

	val, err := json.Marshal(LeaderRecord{Instance: s.cfg.Instance, Host: s.cfg.Host, PID: os.Getpid(), Since: time.Now()})
	if err != nil {
		return nil, 0, err
	}
	resp, err := s.cfg.Client.Txn(rctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(val), clientv3.WithLease(l.id))).
		Else(clientv3.OpGet(key)).
		Commit()
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		l.end(s.now(), ended(ReasonLeaseLost, "etcd reports lease %x gone (campaign for %s)", int64(l.id), job))
		return nil, 0, err
	}
	if err != nil {
		return nil, 0, err
	}
	if !resp.Succeeded {
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			return nil, 0, nil // deleted in between: try again now
		}
		if clientv3.LeaseID(kvs[0].Lease) == l.id {
			// Our own key, from an attempt whose answer was lost. Taking it over would
			// reuse a token; delete it (only that exact key) and create a fresh one.
			_, err := s.cfg.Client.Txn(rctx).
				If(clientv3.Compare(clientv3.CreateRevision(key), "=", kvs[0].CreateRevision)).
				Then(clientv3.OpDelete(key)).
				Commit()
			return nil, 0, err
		}
		return nil, resp.Header.Revision, nil
	}

	token := resp.Header.Revision
	tlog := s.log.With("job", job, "token", token)
	if s.afterWinTxn != nil {
		s.afterWinTxn()
	}
	if !l.dl.Valid(s.now()) {
		// etcd accepted the key, but the answer came after the lease's deadline. The
		// key goes when the lease is revoked or expires; this win is void.
		tlog.Warn("won after the lease deadline; discarding the win", "lease", int64(l.id))
		return nil, 0, ended(ReasonExpired, "won after the lease deadline")
	}
	t := &Term{s: s, l: l, job: job, key: key, token: token, started: time.Now(), log: tlog}
	t.ctx, t.cancel = context.WithCancelCause(l.ctx)
	context.AfterFunc(t.ctx, func() {
		t.done.Store(true)
		tlog.Info("term ended", "reason", t.Reason(), "err", t.Err(), "held_for", time.Since(t.started))
	})
	go t.watchKey()
	tlog.Info("term started", "lease", int64(l.id), "deadline_in", time.Duration(l.dl.Load()-s.now()))
	return t, 0, nil
}

// waitForDelete returns when key is deleted after revision rev, when the watch
// breaks, after the slow re-check interval, or when ctx is done.
func (s *Session) waitForDelete(ctx context.Context, key string, rev int64) {
	wctx, cancel := context.WithTimeout(ctx, 3*s.cfg.TTL)
	defer cancel()
	s.stats.add(&s.stats.waiting, 1)
	defer s.stats.add(&s.stats.waiting, -1)
	for resp := range s.cfg.Client.Watch(clientv3.WithRequireLeader(wctx), key, clientv3.WithRev(rev+1)) {
		if resp.Err() != nil {
			return
		}
		for _, ev := range resp.Events {
			if ev.Type == clientv3.EventTypeDelete {
				return
			}
		}
	}
}
