package scheduler

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/snip/snip-jobs/leadership"
)

// metrics are the scheduler's Prometheus series. With a nil Registerer they are
// still counted (status reads some of them) but not exported.
type metrics struct {
	leader        *prometheus.GaugeVec   // job
	token         *prometheus.GaugeVec   // job
	termStarts    *prometheus.CounterVec // job
	termEnds      *prometheus.CounterVec // job, reason
	runs          *prometheus.CounterVec // job, result
	rejections    *prometheus.CounterVec // resource
	staleHolders  *prometheus.CounterVec // resource
	slotsMissed   *prometheus.CounterVec // job
	slotsCaughtUp *prometheus.CounterVec // job
	overruns      *prometheus.CounterVec // job
	watchdog      *prometheus.CounterVec // job
	holdbacks     *prometheus.CounterVec // job
}

func newMetrics(reg prometheus.Registerer, session Session, controls func(chan<- prometheus.Metric)) *metrics {
	m := &metrics{
		leader: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "snip_jobs_leader", Help: "1 while this instance holds the job's term."}, []string{"job"}),
		token: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "snip_jobs_term_token", Help: "Fencing token of this instance's current term of the job (0 when not leading)."}, []string{"job"}),
		termStarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "snip_jobs_term_starts_total", Help: "Terms won by this instance."}, []string{"job"}),
		termEnds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "snip_jobs_term_ends_total", Help: "Terms of this instance that ended, by reason."}, []string{"job", "reason"}),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "snip_jobs_runs_total", Help: "Job runs by result (ok, error, panic, stale, cancelled)."}, []string{"job", "result"}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "snip_jobs_fenced_rejections_total", Help: "Writes refused because a newer term had written to the resource."}, []string{"resource"}),
		staleHolders: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "snip_jobs_fence_stale_holders_ended_total", Help: "Transactions of an older term that held a resource's row, ended by this instance's newer term waiting for it."}, []string{"resource"}),
		slotsMissed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "snip_jobs_cron_slots_skipped_total", Help: "Cron slots missed while nobody ran the job and skipped: by the catch-up policy, or missed before the catch-up window."}, []string{"job"}),
		slotsCaughtUp: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "snip_jobs_cron_slots_caught_up_total", Help: "Cron slots run late, after being missed."}, []string{"job"}),
		overruns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "snip_jobs_overruns_total", Help: "Runs still going after the grace period that followed the end of their term."}, []string{"job"}),
		watchdog: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "snip_jobs_watchdog_resignations_total", Help: "Terms resigned because the job reported no progress within progress_timeout."}, []string{"job"}),
		holdbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "snip_jobs_spread_holdbacks_total", Help: "Campaign attempts delayed because this instance led more singletons than another live instance."}, []string{"job"}),
	}
	if reg != nil {
		reg.MustRegister(m.leader, m.token, m.termStarts, m.termEnds, m.runs, m.rejections, m.staleHolders,
			m.slotsMissed, m.slotsCaughtUp, m.overruns, m.watchdog, m.holdbacks)
		if session != nil {
			reg.MustRegister(sessionCollector{session})
		}
		reg.MustRegister(funcCollector{descs: controlsDescs, collect: controls})
	}
	return m
}

// sessionCollector exports the leadership session's counters at scrape time.
type sessionCollector struct{ s Session }

var (
	descHeadroom = prometheus.NewDesc("snip_jobs_lease_headroom_seconds",
		"Time left until the lease's deadline (TTL − margin after the last acknowledged keep-alive); 0 without a lease.", nil, nil)
	descLeaseUp = prometheus.NewDesc("snip_jobs_lease_up", "1 while the instance holds a live lease (etcd's, or its instance Lease on Kubernetes).", nil, nil)
	descGranted = prometheus.NewDesc("snip_jobs_leases_granted_total", "Leases granted to this instance (etcd leases; incarnations of its instance Lease on Kubernetes).", nil, nil)
	descKASent  = prometheus.NewDesc("snip_jobs_keepalives_sent_total", "Keep-alives sent.", nil, nil)
	descKAFail  = prometheus.NewDesc("snip_jobs_keepalive_failures_total", "Keep-alives that failed or timed out.", nil, nil)
	descEnds    = prometheus.NewDesc("snip_jobs_lease_ends_total", "Leases of this instance that ended, by reason.", []string{"reason"}, nil)
	descReclaim = prometheus.NewDesc("snip_jobs_predecessor_leases_reclaimed_total", "Leases of a dead predecessor process revoked at start.", nil, nil)
)

func (c sessionCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descHeadroom, descLeaseUp, descGranted, descKASent, descKAFail, descEnds, descReclaim} {
		ch <- d
	}
}

func (c sessionCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Stats()
	up := 0.0
	if st.Lease != "" {
		up = 1
	}
	ch <- prometheus.MustNewConstMetric(descHeadroom, prometheus.GaugeValue, st.Headroom.Seconds())
	ch <- prometheus.MustNewConstMetric(descLeaseUp, prometheus.GaugeValue, up)
	ch <- prometheus.MustNewConstMetric(descGranted, prometheus.CounterValue, float64(st.LeasesGranted))
	ch <- prometheus.MustNewConstMetric(descKASent, prometheus.CounterValue, float64(st.KeepAlivesSent))
	ch <- prometheus.MustNewConstMetric(descKAFail, prometheus.CounterValue, float64(st.KeepAliveFailures))
	ch <- prometheus.MustNewConstMetric(descReclaim, prometheus.CounterValue, float64(st.Reclaimed))
	for _, r := range leadership.Reasons {
		ch <- prometheus.MustNewConstMetric(descEnds, prometheus.CounterValue, float64(st.LeaseEnds[r]), string(r))
	}
}

// funcCollector exports what collect says at scrape time.
type funcCollector struct {
	descs   []*prometheus.Desc
	collect func(chan<- prometheus.Metric)
}

func (c funcCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c funcCollector) Collect(ch chan<- prometheus.Metric) { c.collect(ch) }
