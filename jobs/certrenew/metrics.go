package certrenew

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/snip/snip-jobs/jobs/certrenew/acmeflow"
	"github.com/snip/snip-jobs/jobs/certrenew/domainstore"
)

var allStates = []string{domainstore.StateValid, domainstore.StateDue, domainstore.StateExpired, domainstore.StatePending,
	domainstore.StateFailing, domainstore.StateInvalid}

// metrics are a job's Prometheus series, labelled by job. With a nil
// Registerer they are counted but not exported.
type metrics struct {
	flow          acmeflow.Counters    // the store's and the flow's
	certificates  *prometheus.GaugeVec // job, state
	soonestExpiry *prometheus.GaugeVec // job
	budgetLeft    *prometheus.GaugeVec // job
	pausedS       *prometheus.GaugeVec // job
	oldKeys       *prometheus.GaugeVec // job
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	var regErr error
	// adopt registers c, or returns the collector already registered under
	// the same name (a second certrenew job in the same process).
	adopt := func(c prometheus.Collector) prometheus.Collector {
		if reg == nil || regErr != nil {
			return c
		}
		err := reg.Register(c)
		if are := (prometheus.AlreadyRegisteredError{}); errors.As(err, &are) {
			return are.ExistingCollector
		}
		regErr = err
		return c
	}
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return adopt(prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, append([]string{"job"}, labels...))).(*prometheus.GaugeVec)
	}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return adopt(prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, append([]string{"job"}, labels...))).(*prometheus.CounterVec)
	}
	m := &metrics{
		certificates: gauge("snip_certrenew_certificates",
			"Custom domains by certificate state (valid, due, expired, pending, failing, invalid), as of the last pass.", "state"),
		soonestExpiry: gauge("snip_certrenew_soonest_expiry_days",
			"Days until the soonest not-after among current certificates of wanted domains (negative: expired), as of the last pass."),
		flow: acmeflow.Counters{
			Orders:   counter("snip_certrenew_orders_total", "Orders finished, by result (issued, failed).", "result"),
			Failures: counter("snip_certrenew_failures_total", "Failed CA calls (orders, ARI checks, account), by reason.", "reason"),
			RateLimitWaits: counter("snip_certrenew_rate_limit_waits_total",
				"Times the CA answered rateLimited and a domain (or the renewer) was held back until its Retry-After."),
			RateLimitWaitSeconds: counter("snip_certrenew_rate_limit_wait_seconds_total", "Sum of the Retry-After waits imposed by rate limits."),
			AlreadyReplaced: counter("snip_certrenew_already_replaced_total",
				"Renewals the CA refused with 409 alreadyReplaced, which lego silently ordered again without \"replaces\" (not an ARI renewal)."),
			Recovered: counter("snip_certrenew_recovered_total",
				"Certificates the CA issued to an order left unfinished (its term could not store them, or lego's call failed after the CA accepted the CSR), fetched and stored instead of ordering again (also counted in orders_total as issued)."),
		},
		budgetLeft: gauge("snip_certrenew_order_budget_remaining",
			"Orders the renewer may still start in the current 3-hour window, as of the last pass."),
		pausedS: gauge("snip_certrenew_paused_seconds",
			"Seconds the renewer stays paused after a 503 or an account-wide rate limit (0: not paused), as of the last pass."),
		oldKeys: gauge("snip_certrenew_sealed_with_old_keys",
			"Stored private keys still sealed with a key other than the sealing key: 0 means the old key may be removed."),
	}
	if regErr != nil {
		return nil, regErr
	}
	return m, nil
}

// publish sets the gauges from what the pass saw and did.
func (p *pass) publish(ctx context.Context) {
	m, job := p.j.m, p.r.Job
	counts := p.states.counts()
	counts[domainstore.StateInvalid] = len(p.invalid)
	for _, s := range allStates {
		m.certificates.WithLabelValues(job, s).Set(float64(counts[s]))
	}
	soonest, any := time.Time{}, false
	for _, d := range p.domains {
		if d.Cert != nil && (!any || d.Cert.NotAfter.Before(soonest)) {
			soonest, any = d.Cert.NotAfter, true
		}
	}
	if any {
		m.soonestExpiry.WithLabelValues(job).Set(soonest.Sub(p.clock.Now()).Hours() / 24)
	}
	d, _ := p.flow.Paused()
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
