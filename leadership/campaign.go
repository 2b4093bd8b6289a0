package leadership

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

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

// WithHoldback makes the campaign wait f() before every attempt to win (the
// first, and each after the holder goes). A scheduler spreading singletons
// over instances returns a short delay while this instance leads more than
// another, so that instances with fewer terms win first.
func WithHoldback(f func() time.Duration) CampaignOption {
	return func(o *campaignOptions) { o.holdback = f }
}

// Holdback is the wait that WithHoldback set among opts, or nil: for a stand-in
// session in a test that honours the same options.
func Holdback(opts ...CampaignOption) func() time.Duration {
	var o campaignOptions
	for _, opt := range opts {
		opt(&o)
	}
	return o.holdback
}

// Campaign blocks until this session wins job, ctx is done, or the session
// closes. Each attempt is the store's (Store's Held.Contend): a win on the
// current lease, or a wait until the holder goes. The term returned is
// attached to the lease that was live when the store recorded the win, and
// was checked to be before that lease's deadline after the store answered:
// a campaign that waited through a lease's end continues on the next lease
// and never returns a term of the old one. A win that comes after ctx ended
// (its write was on its way) is released, and Campaign returns ctx's error.
func (s *Session) Campaign(ctx context.Context, job string, opts ...CampaignOption) (*Term, error) {
	if err := CheckName("job", job); err != nil {
		return nil, err
	}
	if err := s.store.CheckJob(job); err != nil {
		return nil, err
	}
	slot, err := s.busy.take(job)
	if err != nil {
		return nil, err
	}
	t, err := s.campaign(ctx, job, Holdback(opts...))
	if err != nil {
		s.busy.release(job, slot)
		return nil, err
	}
	s.busy.hold(slot, t.ctx)
	context.AfterFunc(t.ctx, func() { s.busy.release(job, slot) })
	return t, nil
}

func (s *Session) campaign(ctx context.Context, job string, holdback func() time.Duration) (*Term, error) {
	log := s.log.With("job", job)
	for {
		if holdback != nil {
			if d := holdback(); d > 0 && !sleep.For(ctx, d) {
				return nil, ctx.Err()
			}
		}
		l, err := s.waitLease(ctx)
		if err != nil {
			return nil, err
		}
		claim, err := l.held.Contend(ctx, job)
		switch {
		case claim != nil && ctx.Err() != nil:
			l.handBack(job, claim)
			return nil, ctx.Err()
		case claim != nil:
			if t := l.grant(job, claim); t != nil {
				return t, nil
			}
			sleep.For(ctx, s.cfg.RenewInterval/4)
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case err != nil:
			log.Debug("campaign attempt failed; retrying", "err", err)
			sleep.For(ctx, s.cfg.RenewInterval/4)
		}
	}
}

// grant makes the term of a claim won on l, unless l's deadline passed before
// the store's answer arrived: that win is void (its record goes with the
// lease, and peers take it over from there).
func (l *Lease) grant(job string, c Claim) *Term {
	s := l.s
	tlog := s.log.With("job", job, "token", c.Token())
	if !l.Valid() {
		tlog.Warn("won after the lease deadline; discarding the win", "lease", l.held.ID())
		return nil
	}
	t := &Term{s: s, l: l, claim: c, job: job, token: c.Token(), started: time.Now(), log: tlog}
	t.ctx, t.cancel = context.WithCancelCause(l.ctx)
	context.AfterFunc(t.ctx, func() {
		t.done.Store(true)
		tlog.Info("term ended", "reason", t.Reason(), "err", t.Err(), "held_for", time.Since(t.started))
	})
	go func() {
		if cause := c.Follow(t.ctx); cause != nil {
			t.end(cause)
		}
	}()
	tlog.Info("term started", "lease", l.held.ID(), "deadline_in", time.Until(l.Deadline()))
	return t
}

// handBack releases a claim won after the campaign was given up (its write
// was on its way when ctx ended: a pause, a drain), in one attempt bounded
// like Resign's: no term is granted, and its record must not name this
// session meanwhile, as peers would wait for it while the lease lives.
func (l *Lease) handBack(job string, c Claim) {
	log := l.s.log.With("job", job, "token", c.Token())
	ctx, cancel := context.WithTimeout(l.ctx, resignAttempt)
	defer cancel()
	if err := c.Release(ctx); err != nil {
		log.Warn("won as the campaign was given up; not released, peers wait for this lease", "err", err)
		return
	}
	log.Info("won as the campaign was given up; released")
}

// busy is the jobs with a campaign in progress or a live term.
type busy struct {
	mu   sync.Mutex
	jobs map[string]*busySlot
}

// busySlot is a job's place in busy: a campaign in progress (term nil) or the
// context of the term it won. A term whose context is done no longer holds
// the job, even before release has run: release runs on its own goroutine
// after the context ends, and a Campaign made as soon as Resign returns must
// not be refused for it.
type busySlot struct {
	term context.Context
}

// take claims job for a campaign, or says it is busy.
func (b *busy) take(job string) (*busySlot, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if cur := b.jobs[job]; cur != nil && (cur.term == nil || cur.term.Err() == nil) {
		return nil, fmt.Errorf("%w: %s", ErrBusy, job)
	}
	slot := &busySlot{}
	b.jobs[job] = slot
	return slot, nil
}

// hold records the term a campaign won.
func (b *busy) hold(slot *busySlot, term context.Context) {
	b.mu.Lock()
	slot.term = term
	b.mu.Unlock()
}

// release frees job unless another campaign has taken its place since.
func (b *busy) release(job string, slot *busySlot) {
	b.mu.Lock()
	if b.jobs[job] == slot {
		delete(b.jobs, job)
	}
	b.mu.Unlock()
}
