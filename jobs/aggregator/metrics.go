package aggregator

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the job's Prometheus series, labelled with the job's name. With
// a nil Registerer they are counted but not exported.
type metrics struct {
	folded   prometheus.Counter     // valid events added to the counts
	rejected *prometheus.CounterVec // reason
	batches  prometheus.Counter
	latency  prometheus.Histogram // seconds per batch transaction, commit included
	backlog  prometheus.Gauge     // estimate of committed events not yet folded
	pruned   prometheus.Counter
	errors   prometheus.Counter // failed batches or prunes, retried
	idle     prometheus.Counter // reads that found nothing to fold
}

func newMetrics(reg prometheus.Registerer, job string) (*metrics, error) {
	labels := prometheus.Labels{"job": job}
	m := &metrics{
		folded: prometheus.NewCounter(prometheus.CounterOpts{ConstLabels: labels,
			Name: "snip_aggregator_events_folded_total", Help: "Valid click events added to link_counts and link_hourly_counts."}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{ConstLabels: labels,
			Name: "snip_aggregator_events_rejected_total", Help: "Click events moved to click_rejects, by reason."}, []string{"reason"}),
		batches: prometheus.NewCounter(prometheus.CounterOpts{ConstLabels: labels,
			Name: "snip_aggregator_batches_total", Help: "Batches committed (each one fenced transaction)."}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{ConstLabels: labels,
			Name: "snip_aggregator_batch_duration_seconds", Help: "Time of one batch's transaction, commit included.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
		backlog: prometheus.NewGauge(prometheus.GaugeOpts{ConstLabels: labels,
			Name: "snip_aggregator_backlog_events", Help: "Estimate of committed click events not yet folded (from the table's live-row statistics)."}),
		pruned: prometheus.NewCounter(prometheus.CounterOpts{ConstLabels: labels,
			Name: "snip_aggregator_events_pruned_total", Help: "Processed click events deleted from click_events."}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{ConstLabels: labels,
			Name: "snip_aggregator_errors_total", Help: "Batches or prunes that failed and were retried after a back-off."}),
		idle: prometheus.NewCounter(prometheus.CounterOpts{ConstLabels: labels,
			Name: "snip_aggregator_idle_polls_total", Help: "Reads that found no click event to fold: no batch was opened, nothing written."}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	if m.folded, err = register(reg, m.folded); err != nil {
		return nil, err
	}
	if m.rejected, err = register(reg, m.rejected); err != nil {
		return nil, err
	}
	if m.batches, err = register(reg, m.batches); err != nil {
		return nil, err
	}
	if m.latency, err = register(reg, m.latency); err != nil {
		return nil, err
	}
	if m.backlog, err = register(reg, m.backlog); err != nil {
		return nil, err
	}
	if m.pruned, err = register(reg, m.pruned); err != nil {
		return nil, err
	}
	if m.errors, err = register(reg, m.errors); err != nil {
		return nil, err
	}
	if m.idle, err = register(reg, m.idle); err != nil {
		return nil, err
	}
	return m, nil
}

// register registers c, or returns the collector already registered under
// the same description (the same job built again, e.g. on a config reload).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var already prometheus.AlreadyRegisteredError
	if errors.As(err, &already) {
		if existing, ok := already.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, fmt.Errorf("register metrics: %w", err)
}
