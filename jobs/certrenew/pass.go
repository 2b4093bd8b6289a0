package certrenew

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/snip/snip-jobs/scheduler"
)

// pass is one Run: everything it knows comes from PostgreSQL at its start,
// and every write it makes is fenced by the run's token. It orchestrates:
// the term's row and lock-delay (gate), load and decide what is due (store),
// order and store (orderer, on a caSession), then the gauges.
type pass struct {
	j    *job
	r    *scheduler.Run
	opts *Options
	log  *slog.Logger

	clock *dbClock
	stop  *stopper

	gate     *lockDelay
	throttle *caThrottle
	account  *accountStore
	upkeep   *upkeep
	store    *domainStore

	domains []*domain
	invalid []invalidDomain

	states domainStates
}

func newPass(j *job, r *scheduler.Run) *pass {
	p := &pass{j: j, r: r, opts: &j.opts, log: r.Log, clock: &dbClock{}, stop: &stopper{}}
	p.gate = &lockDelay{r: r, log: r.Log, delay: j.opts.LockDelay, stop: p.stop}
	p.throttle = &caThrottle{r: r, log: r.Log, m: j.m, unavailablePause: j.opts.UnavailablePause, stop: p.stop}
	p.store = &domainStore{j: j, r: r, log: r.Log, clock: p.clock}
	p.upkeep = &upkeep{pool: j.pool, keys: j.keys, r: r, log: r.Log}
	p.account = &accountStore{pool: j.pool, keys: j.keys, r: r, log: r.Log, dir: j.opts.Directory, email: j.opts.Email, throttle: p.throttle}
	return p
}

// orderer is the pass's orderer on the CA session ca.
func (p *pass) orderer(ca *caSession) *orderer {
	return &orderer{ca: ca, store: p.store, gate: p.gate, throttle: p.throttle, stop: p.stop, clock: p.clock,
		opts: p.opts, m: p.j.m, job: p.r.Job, log: p.log}
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
		p.gate.end(context.WithoutCancel(parent))
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

	if d, reason := p.throttle.left(); d > 0 {
		p.log.InfoContext(ctx, "renewer paused: not asking the CA this pass", "for", d.Round(time.Second), "reason", reason)
		p.settleAll()
		return nil
	}
	if len(p.domains) == 0 {
		return nil
	}
	ca, err := p.connect(ctx)
	if err != nil {
		p.stop.checkStale(err)
		p.settleAll()
		return fmt.Errorf("certrenew: ACME account: %w", err)
	}
	defer ca.close()
	p.workOn(ctx, p.orderer(ca))
	p.settleAll()
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
	snap, err := p.store.load(ctx)
	if err != nil {
		return fmt.Errorf("certrenew: load domains: %w", err)
	}
	p.domains, p.invalid = snap.domains, snap.invalid
	if !snap.pausedUntil.IsZero() {
		p.throttle.restore(snap.pausedUntil, snap.pauseReason)
	}
	if err := p.store.applyRetryRequests(ctx, p.domains); err != nil {
		p.stop.checkStale(err)
		return fmt.Errorf("certrenew: retry requests: %w", err)
	}
	if err := p.store.recordInvalid(ctx, p.invalid); err != nil {
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
func (p *pass) workOn(ctx context.Context, o *orderer) {
	// Most urgent first: expired certificates, new domains, then by expiry.
	todo := slices.Clone(p.domains)
	key := func(d *domain) time.Time {
		if d.cert == nil {
			return p.clock.at
		}
		return d.cert.notAfter
	}
	slices.SortStableFunc(todo, func(a, b *domain) int {
		return cmp.Or(key(a).Compare(key(b)), cmp.Compare(a.name, b.name))
	})

	tasks := make(chan *domain)
	var wg sync.WaitGroup
	for range min(p.opts.Concurrency, len(todo)) {
		wg.Go(func() {
			for d := range tasks {
				p.states.set(d.name, o.do(ctx, d))
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

// settleAll gives every domain not worked on in this pass its state as
// loaded.
func (p *pass) settleAll() {
	names := make([]string, len(p.domains))
	for i, d := range p.domains {
		names[i] = d.name
	}
	p.states.setUnset(names, func(i int) string { return p.domains[i].state(p.clock.now()) })
}

// connect loads (or creates and registers) the shared account and opens
// the pass's session with the CA.
func (p *pass) connect(ctx context.Context) (*caSession, error) {
	acct, err := p.account.load(ctx)
	if err != nil {
		return nil, err
	}
	ca, err := dialCA(ctx, acct, p.j.roots, p.opts)
	if err != nil {
		p.throttle.failed(ctx, classify(err, &observation{}), "")
		return nil, fmt.Errorf("connect to %s: %w", p.opts.Directory, err)
	}
	if err := p.account.register(ctx, ca.client, acct); err != nil {
		ca.close()
		return nil, err
	}
	if err := ca.answerWith(p.j.dns, p.r); err != nil {
		return nil, err
	}
	return ca, nil
}
