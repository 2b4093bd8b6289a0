package certrenew

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Certificate states (the certificates metric's state label).
const (
	StateValid   = "valid"   // current certificate, not yet due
	StateDue     = "due"     // current certificate past its renewal instant, not yet replaced
	StateExpired = "expired" // current certificate past its not-after
	StatePending = "pending" // no certificate yet
	StateFailing = "failing" // no certificate yet, and the last order failed
	StateInvalid = "invalid" // the domain cannot get one (certrenew_invalid_domains)
)

var allStates = []string{StateValid, StateDue, StateExpired, StatePending, StateFailing, StateInvalid}

// metrics are a job's Prometheus series, labelled by job. With a nil
// Registerer they are counted but not exported.
type metrics struct {
	certificates    *prometheus.GaugeVec   // job, state
	soonestExpiry   *prometheus.GaugeVec   // job
	orders          *prometheus.CounterVec // job, result
	failures        *prometheus.CounterVec // job, reason
	rateLimitWaits  *prometheus.CounterVec // job
	rateLimitWaitS  *prometheus.CounterVec // job
	alreadyReplaced *prometheus.CounterVec // job
	recovered       *prometheus.CounterVec // job
	budgetLeft      *prometheus.GaugeVec   // job
	pausedS         *prometheus.GaugeVec   // job
	oldKeys         *prometheus.GaugeVec   // job
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		certificates: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "snip_certrenew_certificates",
			Help: "Custom domains by certificate state (valid, due, expired, pending, failing, invalid), as of the last pass."},
			[]string{"job", "state"}),
		soonestExpiry: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "snip_certrenew_soonest_expiry_days",
			Help: "Days until the soonest not-after among current certificates of wanted domains (negative: expired), as of the last pass."},
			[]string{"job"}),
		orders: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "snip_certrenew_orders_total",
			Help: "Orders finished, by result (issued, failed)."},
			[]string{"job", "result"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "snip_certrenew_failures_total",
			Help: "Failed CA calls (orders, ARI checks, account), by reason."},
			[]string{"job", "reason"}),
		rateLimitWaits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "snip_certrenew_rate_limit_waits_total",
			Help: "Times the CA answered rateLimited and a domain (or the renewer) was held back until its Retry-After."},
			[]string{"job"}),
		rateLimitWaitS: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "snip_certrenew_rate_limit_wait_seconds_total",
			Help: "Sum of the Retry-After waits imposed by rate limits."},
			[]string{"job"}),
		alreadyReplaced: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "snip_certrenew_already_replaced_total",
			Help: "Renewals the CA refused with 409 alreadyReplaced, which lego silently ordered again without \"replaces\" (not an ARI renewal)."},
			[]string{"job"}),
		recovered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "snip_certrenew_recovered_total",
			Help: "Certificates the CA issued to an order left unfinished (its term could not store them, or lego's call failed after the CA accepted the CSR), fetched and stored instead of ordering again (also counted in orders_total as issued)."},
			[]string{"job"}),
		budgetLeft: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "snip_certrenew_order_budget_remaining",
			Help: "Orders the renewer may still start in the current 3-hour window, as of the last pass."},
			[]string{"job"}),
		pausedS: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "snip_certrenew_paused_seconds",
			Help: "Seconds the renewer stays paused after a 503 or an account-wide rate limit (0: not paused), as of the last pass."},
			[]string{"job"}),
		oldKeys: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "snip_certrenew_sealed_with_old_keys",
			Help: "Stored private keys still sealed with a key other than the sealing key: 0 means the old key may be removed."},
			[]string{"job"}),
	}
	if reg == nil {
		return m, nil
	}
	cs := []any{&m.certificates, &m.soonestExpiry, &m.orders, &m.failures, &m.rateLimitWaits,
		&m.rateLimitWaitS, &m.alreadyReplaced, &m.recovered, &m.budgetLeft, &m.pausedS, &m.oldKeys}
	for _, c := range cs {
		if err := register(reg, c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// register registers *c, or points it at the collector already registered
// under the same name (a second certrenew job in the same process).
func register(reg prometheus.Registerer, c any) error {
	switch v := c.(type) {
	case **prometheus.GaugeVec:
		if err := reg.Register(*v); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return err
			}
			*v = are.ExistingCollector.(*prometheus.GaugeVec)
		}
	case **prometheus.CounterVec:
		if err := reg.Register(*v); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return err
			}
			*v = are.ExistingCollector.(*prometheus.CounterVec)
		}
	}
	return nil
}

// publish sets the gauges from what the pass saw and did.
func (p *pass) publish(ctx context.Context) {
	m, job := p.j.m, p.r.Job
	counts := p.states.counts()
	counts[StateInvalid] = len(p.invalid)
	for _, s := range allStates {
		m.certificates.WithLabelValues(job, s).Set(float64(counts[s]))
	}
	soonest, any := time.Time{}, false
	for _, d := range p.domains {
		if d.cert != nil && (!any || d.cert.notAfter.Before(soonest)) {
			soonest, any = d.cert.notAfter, true
		}
	}
	if any {
		m.soonestExpiry.WithLabelValues(job).Set(soonest.Sub(p.clock.now()).Hours() / 24)
	}
	d, _ := p.throttle.left()
	m.pausedS.WithLabelValues(job).Set(d.Seconds())

	// The budget and old-key gauges need a query. Not when the pass was
	// cancelled (term over, shutdown): the job must return at once — waiting
	// here for a pool connection held up a SIGTERM hand-over by the whole
	// grace period in the fault-injection run — and the next pass sets them.
	if ctx.Err() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	used, old, err := p.upkeep.counts(ctx)
	if err != nil {
		p.log.DebugContext(ctx, "metrics query failed", "err", err)
		return
	}
	m.budgetLeft.WithLabelValues(job).Set(float64(max(p.opts.OrderBudget-used, 0)))
	m.oldKeys.WithLabelValues(job).Set(float64(old))
}
