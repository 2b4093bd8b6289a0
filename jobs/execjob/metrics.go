package execjob

import "github.com/prometheus/client_golang/prometheus"

// metrics are an exec job's own, per job.
type metrics struct {
	running prometheus.Gauge   // programs whose tree is not proven gone
	dropped prometheus.Counter // output lines dropped
	killed  prometheus.Counter // processes the supervisor had to kill
}

func newMetrics(reg prometheus.Registerer, job string) (*metrics, error) {
	l := prometheus.Labels{"job": job}
	m := &metrics{
		running: prometheus.NewGauge(prometheus.GaugeOpts{Name: "snip_jobs_exec_programs_running", ConstLabels: l,
			Help: "Programs of the exec job on this instance whose process tree is not proven gone."}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "snip_jobs_exec_output_dropped_lines_total", ConstLabels: l,
			Help: "Lines of the program's output not logged: more than the log takes in a second."}),
		killed: prometheus.NewCounter(prometheus.CounterOpts{Name: "snip_jobs_exec_killed_processes_total", ConstLabels: l,
			Help: "Processes of the program's tree its supervisor signalled to end it (at a term's end, a timeout, or left behind)."}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.running, m.dropped, m.killed} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
