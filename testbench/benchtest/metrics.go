package benchtest

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Metrics is one scrape of a /metrics page (Prometheus text format): each
// sample's value by its series, "name{label="value",...}". What an etcd
// member counts is the measure of what a client asked of it: every gRPC
// request (grpc_server_msg_received_total), every stream opened
// (grpc_server_started_total), every call ended, by code
// (grpc_server_handled_total).
type Metrics map[string]float64

// ScrapeMetrics reads base + "/metrics": an etcd member's plain client URL
// (http://host:port), or a snip-jobs instance's admin URL.
func ScrapeMetrics(ctx context.Context, endpoint string) (Metrics, error) {
	return scrape(ctx, http.DefaultClient, endpoint)
}

func scrape(ctx context.Context, hc *http.Client, endpoint string) (Metrics, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(endpoint, "/")+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("benchtest: metrics of %s: %w", endpoint, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("benchtest: metrics of %s: %s", endpoint, resp.Status)
	}
	m := Metrics{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		m[line[:i]] = v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("benchtest: metrics of %s: %w", endpoint, err)
	}
	return m, nil
}

// Sum adds the samples of the metric called name whose labels include every
// pair given as `label="value"` (e.g. `grpc_method="LeaseKeepAlive"`).
func (m Metrics) Sum(name string, labels ...string) float64 {
	var sum float64
	for series, v := range m {
		if !strings.HasPrefix(series, name) {
			continue
		}
		rest := series[len(name):]
		if rest != "" && rest[0] != '{' {
			continue // another metric whose name starts with this one
		}
		ok := true
		for _, l := range labels {
			if !strings.Contains(rest, l) {
				ok = false
				break
			}
		}
		if ok {
			sum += v
		}
	}
	return sum
}

// NotOK adds grpc_server_handled_total over every code but OK: the calls and
// streams etcd ended with an error.
func (m Metrics) NotOK() float64 {
	return m.Sum("grpc_server_handled_total") - m.Sum("grpc_server_handled_total", `grpc_code="OK"`)
}

// Minus is the change of every series from before to m (series absent before
// count from zero).
func (m Metrics) Minus(before Metrics) Metrics {
	d := Metrics{}
	for k, v := range m {
		d[k] = v - before[k]
	}
	return d
}

// ScrapeMetricsWith is ScrapeMetrics through hc (a server that wants TLS or
// a token: kube-apiserver's /metrics).
func ScrapeMetricsWith(ctx context.Context, hc *http.Client, endpoint string) (Metrics, error) {
	return scrape(ctx, hc, endpoint)
}
