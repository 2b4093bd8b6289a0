package certrenew

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/snip/snip-jobs/jobs/certrenew/acmeflow"
	"github.com/snip/snip-jobs/jobs/certrenew/domainstore"
	"github.com/snip/snip-jobs/scheduler"
)

// pass is one Run: everything it knows comes from PostgreSQL at its start,
// and every write it makes is fenced by the run's token. It orchestrates:
// the term's row and lock-delay (gate), load and decide what is due (store),
// order and store (flow's Orderer), then the gauges.
type pass struct {
	j    *job
	r    *scheduler.Run
	opts *Options
	log  *slog.Logger

	clock *domainstore.Clock
	stop  *stopper

	gate   *lockDelay
	upkeep *upkeep
	store  *domainstore.Store
	flow   *acmeflow.Flow

	domains []*domainstore.Domain
	invalid []domainstore.Invalid

	states domainStates
}

func newPass(j *job, r *scheduler.Run) *pass {
	p := &pass{j: j, r: r, opts: &j.opts, log: r.Log, clock: &domainstore.Clock{}, stop: &stopper{},
		states: domainStates{m: map[string]string{}}}
	p.gate = &lockDelay{r: r, log: r.Log, delay: j.opts.LockDelay, stop: p.stop}
	p.upkeep = &upkeep{pool: j.pool, keys: j.keys, r: r, log: r.Log}
	sc := domainstore.Config{Pool: j.pool, Keys: j.keys, Run: r, Log: r.Log, Clock: p.clock, Policy: j.opts.policy(),
		Orders: j.m.flow.Orders, Failures: j.m.flow.Failures}
	p.store = domainstore.New(sc)
	p.flow = acmeflow.New(acmeflow.Config{Config: sc, Store: p.store, Gate: p.gate, Stale: p.stop.checkStale, Counters: &j.m.flow,
		Directory: j.opts.Directory, Email: j.opts.Email, Profile: j.opts.Profile, Roots: j.roots, DNS: j.dns,
		Concurrency: j.opts.Concurrency, OrderTimeout: j.opts.OrderTimeout, UnavailablePause: j.opts.UnavailablePause})
	return p
}

func (p *pass) run(parent context.Context) error {
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	p.stop.cancel = cancel

	if err := p.gate.start(ctx); err != nil {
		return p.result(parent, fmt.Errorf("certrenew: record the term: %w", err))
	}
	hbCtx, hbStop := context.WithCancel(ctx)
	var hb sync.WaitGroup
	if p.opts.LockDelay > 0 {
		hb.Go(func() { p.gate.heartbeat(hbCtx) })
	}

	err := p.work(ctx)

	hbStop()
	hb.Wait()
	// Every CA call of this pass has returned: if the term still holds, say
	// so, and the next leader need not wait the lock-delay.
	if p.stop.err == nil && p.r.Valid() {
		p.gate.end(context.WithoutCancel(parent), err == nil)
	}
	return p.result(parent, err)
}

func (p *pass) result(parent context.Context, err error) error {
	switch {
	case p.stop.err != nil:
		return fmt.Errorf("certrenew: pass stopped: %w", p.stop.err)
	case parent.Err() != nil:
		return fmt.Errorf("certrenew: pass stopped: %w", context.Cause(parent))
	}
	return err
}

// work is the pass between the term's start and its end: load, then, unless
// the renewer is paused, work on every domain with the CA.
func (p *pass) work(ctx context.Context) error {
	if err := p.prepare(ctx); err != nil {
		return err
	}
	defer p.publish(ctx)

	if d, reason := p.flow.Paused(); d > 0 {
		p.log.InfoContext(ctx, "renewer paused: not asking the CA this pass", "for", d.Round(time.Second), "reason", reason)
		p.states.settle(p.domains, p.clock.Now())
		return nil
	}
	if len(p.domains) == 0 {
		return nil
	}
	o, err := p.flow.Connect(ctx)
	if err != nil {
		p.stop.checkStale(err)
		p.states.settle(p.domains, p.clock.Now())
		return fmt.Errorf("certrenew: ACME account: %w", err)
	}
	defer o.Close()
	p.workOn(ctx, o)
	p.states.settle(p.domains, p.clock.Now())
	return nil
}

// prepare is what the pass does before it asks the CA anything:
// housekeeping, loading the domains, the operators' retry requests, the
// invalid names, re-sealing.
func (p *pass) prepare(ctx context.Context) error {
	if err := p.upkeep.housekeeping(ctx); err != nil {
		p.stop.checkStale(err)
		return fmt.Errorf("certrenew: housekeeping: %w", err)
	}
	snap, err := p.store.Load(ctx)
	if err != nil {
		return fmt.Errorf("certrenew: load domains: %w", err)
	}
	p.j.seen.Store(&snap.Seen)
	p.domains, p.invalid = snap.Domains, snap.Invalid
	if !snap.PausedUntil.IsZero() {
		p.flow.Restore(snap.PausedUntil, snap.PauseReason)
	}
	if err := p.store.ApplyRetryRequests(ctx, p.domains); err != nil {
		p.stop.checkStale(err)
		return fmt.Errorf("certrenew: retry requests: %w", err)
	}
	if err := p.store.RecordInvalid(ctx, p.invalid); err != nil {
		p.stop.checkStale(err)
		return fmt.Errorf("certrenew: record invalid domains: %w", err)
	}
	if err := p.upkeep.reseal(ctx); err != nil {
		p.stop.checkStale(err)
		return fmt.Errorf("certrenew: re-seal keys: %w", err)
	}
	return nil
}

// workOn has o work on every domain, concurrency at a time, until all are
// done or the pass ends.
func (p *pass) workOn(ctx context.Context, o *acmeflow.Orderer) {
	// Most urgent first: expired certificates, new domains, then by expiry.
	todo := slices.Clone(p.domains)
	key := func(d *domainstore.Domain) time.Time {
		if d.Cert == nil {
			return p.clock.At()
		}
		return d.Cert.NotAfter
	}
	slices.SortStableFunc(todo, func(a, b *domainstore.Domain) int {
		return cmp.Or(key(a).Compare(key(b)), cmp.Compare(a.Name, b.Name))
	})

	tasks := make(chan *domainstore.Domain)
	var wg sync.WaitGroup
	for range min(p.opts.Concurrency, len(todo)) {
		wg.Go(func() {
			for d := range tasks {
				p.states.set(d.Name, o.Do(ctx, d))
				p.r.Progress()
			}
		})
	}
feed:
	for _, d := range todo {
		select {
		case tasks <- d:
		case <-ctx.Done():
			break feed
		}
	}
	close(tasks)
	wg.Wait()
}
