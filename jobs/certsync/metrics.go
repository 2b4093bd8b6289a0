package certsync

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are a job's series, labelled with its name. With a nil
// Registerer they are counted but not exported.
type metrics struct {
	files, skipped, inSync, reloadPending prometheus.Gauge
	writes, removals                      prometheus.Counter
	errors, reloads                       *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, job string) (*metrics, error) {
	l := prometheus.Labels{"job": job}
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: l})
	}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: l})
	}
	m := &metrics{
		files: gauge("snip_certsync_files", "Certificate files in the directory after the last sync."),
		skipped: gauge("snip_certsync_skipped_names",
			"Current certificates not written because their domain is not a safe file name (each logged once)."),
		inSync: gauge("snip_certsync_in_sync",
			"1 when the last sync left the directory matching the certificates in memory; 0 while something is retried."),
		reloadPending: gauge("snip_certsync_reload_pending",
			"1 while a change of the directory waits for a successful run of the reload command."),
		writes:   counter("snip_certsync_writes_total", "Certificate files written (a new or renewed certificate)."),
		removals: counter("snip_certsync_removals_total", "Certificate files removed (their domain has no current certificate)."),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "snip_certsync_errors_total", ConstLabels: l,
			Help: "Failed operations, retried: dir (the directory cannot be used), write, remove."}, []string{"op"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "snip_certsync_reloads_total", ConstLabels: l,
			Help: "Runs of the reload command, by result: ok, failed (retried)."}, []string{"result"}),
	}
	for _, op := range []string{"dir", "write", "remove"} {
		m.errors.WithLabelValues(op)
	}
	m.reloads.WithLabelValues("ok")
	m.reloads.WithLabelValues("failed")
	if reg == nil {
		return m, nil
	}
	err := errors.Join(register(reg, &m.files), register(reg, &m.skipped), register(reg, &m.inSync),
		register(reg, &m.reloadPending), register(reg, &m.writes), register(reg, &m.removals),
		register(reg, &m.errors), register(reg, &m.reloads))
	if err != nil {
		return nil, err
	}
	return m, nil
}

// register registers *c, or points it at the collector already registered
// under the same description (the same job built again).
func register[C prometheus.Collector](reg prometheus.Registerer, c *C) error {
	err := reg.Register(*c)
	var already prometheus.AlreadyRegisteredError
	if errors.As(err, &already) {
		if existing, ok := already.ExistingCollector.(C); ok {
			*c = existing
			return nil
		}
	}
	return err
}
