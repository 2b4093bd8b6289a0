// Package promtest runs a real Prometheus for tests: Debian's prometheus
// binary (the package .ci/run installs for promtool), on a loopback port and
// a temporary folder, scraping the targets a test names, and its HTTP API.
//
// What is guaranteed: Start returns once Prometheus says it is ready
// (/-/ready); WaitTargetsUp once every target has been scraped successfully
// at least once; Query and QueryRange return the API's own error for an
// expression it cannot parse or run (an *APIError, never an empty result).
// What is NOT: any check of the data beyond what a test asks; a binary
// other than the one on $PATH; recording or alerting rules (none are
// loaded).
//
// Test-only: the production binary must not import it.
package promtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/snip/snip-jobs/internal/sleep"
	"github.com/snip/snip-jobs/testbench/childproc"
	"github.com/snip/snip-jobs/testbench/freeport"
)

// ReadyBound bounds the wait for /-/ready after a start.
const ReadyBound = 90 * time.Second

// Options configures Start.
type Options struct {
	// JobName is the scrape job's name (its up series' job label).
	JobName string
	// Targets are host:port of the /metrics endpoints to scrape.
	Targets []string
	// Interval is the scrape and evaluation interval (default 1 s).
	Interval time.Duration
	// HonorLabels keeps the series' own job and instance labels, as
	// deploy/prometheus's scrape job does.
	HonorLabels bool
}

// Server is a running Prometheus.
type Server struct {
	dir  string
	url  string
	proc *childproc.Proc
	hc   *http.Client
}

// Binary finds Debian's prometheus, or says how to install it.
func Binary() (string, error) {
	p, err := exec.LookPath("prometheus")
	if err != nil {
		return "", fmt.Errorf("promtest: prometheus not found (%w): install Debian's prometheus package "+
			"(apt-get install --no-install-recommends prometheus), as .ci/run does", err)
	}
	return p, nil
}

// Start writes the scrape configuration and starts Prometheus in a fresh
// temporary folder, returning once it is ready.
func Start(ctx context.Context, opts Options) (_ *Server, err error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	dir, err := os.MkdirTemp("", "promtest-")
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, hc: &http.Client{Timeout: 10 * time.Second}}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config(opts)), 0o644); err != nil {
		return nil, err
	}
	port, err := freeport.Port()
	if err != nil {
		return nil, fmt.Errorf("promtest: %w", err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	s.url = "http://" + addr
	s.proc, err = childproc.Start(childproc.Spec{Path: bin, Log: filepath.Join(dir, "prometheus.log"), Args: []string{
		"--config.file=" + filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path=" + filepath.Join(dir, "data"),
		"--web.listen-address=" + addr,
		"--log.level=warn",
	}})
	if err != nil {
		return nil, fmt.Errorf("promtest: %w", err)
	}
	return s, s.waitReady(ctx)
}

// config is the configuration file for opts.
func config(opts Options) string {
	iv := opts.Interval.String()
	var b strings.Builder
	fmt.Fprintf(&b, "global:\n  scrape_interval: %s\n  scrape_timeout: %s\n  evaluation_interval: %s\n", iv, iv, iv)
	fmt.Fprintf(&b, "scrape_configs:\n  - job_name: %q\n    honor_labels: %t\n    static_configs:\n      - targets:\n", opts.JobName, opts.HonorLabels)
	for _, t := range opts.Targets {
		fmt.Fprintf(&b, "          - %q\n", t)
	}
	return b.String()
}

// waitReady polls /-/ready: Prometheus offers no readiness signal a parent
// can wait on, so polling is the only way.
func (s *Server) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, ReadyBound)
	defer cancel()
	for {
		select {
		case <-s.proc.Done():
			return fmt.Errorf("promtest: prometheus exited (%v) before it was ready; see %s", s.proc.Err(), s.Log())
		default:
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.url+"/-/ready", nil)
		if resp, err := s.hc.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if !sleep.For(ctx, 100*time.Millisecond) {
			return fmt.Errorf("promtest: not ready within %v; see %s", ReadyBound, s.Log())
		}
	}
}

// WaitTargetsUp polls the targets API until every target's last scrape
// succeeded (Prometheus signals nothing else), or ctx ends.
func (s *Server) WaitTargetsUp(ctx context.Context) error {
	var last string
	for {
		var data struct {
			ActiveTargets []struct {
				ScrapeURL string `json:"scrapeUrl"`
				Health    string `json:"health"`
				LastError string `json:"lastError"`
			} `json:"activeTargets"`
		}
		err := s.get(ctx, "/api/v1/targets", nil, &data)
		if err == nil {
			up := len(data.ActiveTargets) > 0
			for _, t := range data.ActiveTargets {
				if t.Health != "up" {
					up, last = false, fmt.Sprintf("%s: %s %s", t.ScrapeURL, t.Health, t.LastError)
				}
			}
			if up {
				return nil
			}
		} else {
			last = err.Error()
		}
		if !sleep.For(ctx, 200*time.Millisecond) {
			return fmt.Errorf("promtest: targets not up (last: %s): %w", last, ctx.Err())
		}
	}
}

// Result is what a query returned: its type, how many series (or, for a
// scalar or a string, 1), and the series' labels.
type Result struct {
	Type    string
	Series  int
	Metrics []map[string]string
}

// Query evaluates expr at the instant at (/api/v1/query).
func (s *Server) Query(ctx context.Context, expr string, at time.Time) (Result, error) {
	return s.query(ctx, "/api/v1/query", url.Values{"query": {expr}, "time": {unix(at)}})
}

// QueryRange evaluates expr from start to end every step, as a graph does
// (/api/v1/query_range).
func (s *Server) QueryRange(ctx context.Context, expr string, start, end time.Time, step time.Duration) (Result, error) {
	return s.query(ctx, "/api/v1/query_range", url.Values{"query": {expr}, "start": {unix(start)}, "end": {unix(end)},
		"step": {strconv.FormatFloat(step.Seconds(), 'f', -1, 64)}})
}

func (s *Server) query(ctx context.Context, path string, q url.Values) (Result, error) {
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := s.get(ctx, path, q, &data); err != nil {
		return Result{}, err
	}
	r := Result{Type: data.ResultType}
	switch data.ResultType {
	case "vector", "matrix":
		var series []struct {
			Metric map[string]string `json:"metric"`
		}
		if err := json.Unmarshal(data.Result, &series); err != nil {
			return Result{}, fmt.Errorf("promtest: %s: %w", path, err)
		}
		r.Series = len(series)
		for _, s := range series {
			r.Metrics = append(r.Metrics, s.Metric)
		}
	default:
		r.Series = 1
	}
	return r, nil
}

// LabelValues are the values of label on the series matching match
// (/api/v1/label/<label>/values), as Grafana's label_values(match, label).
func (s *Server) LabelValues(ctx context.Context, label, match string) ([]string, error) {
	var values []string
	err := s.get(ctx, "/api/v1/label/"+url.PathEscape(label)+"/values", url.Values{"match[]": {match}}, &values)
	return values, err
}

// APIError is an error the API answered with: errorType "bad_data" for an
// expression that does not parse.
type APIError struct {
	Type, Message string
}

func (e *APIError) Error() string { return "prometheus: " + e.Type + ": " + e.Message }

// get calls the API and decodes its data into v.
func (s *Server) get(ctx context.Context, path string, q url.Values, v any) error {
	u := s.url + path
	if q != nil {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		return fmt.Errorf("promtest: %w", err)
	}
	defer resp.Body.Close()
	var body struct {
		Status    string          `json:"status"`
		Data      json.RawMessage `json:"data"`
		ErrorType string          `json:"errorType"`
		Error     string          `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return fmt.Errorf("promtest: %s: %s: %w", path, resp.Status, err)
	}
	if body.Status != "success" {
		return &APIError{Type: body.ErrorType, Message: body.Error}
	}
	return json.Unmarshal(body.Data, v)
}

// IsAPIError reports whether err is the API's answer (not a transport error).
func IsAPIError(err error) bool {
	var e *APIError
	return errors.As(err, &e)
}

func unix(t time.Time) string {
	return strconv.FormatFloat(float64(t.UnixNano())/1e9, 'f', 3, 64)
}

// URL is Prometheus's base URL.
func (s *Server) URL() string { return s.url }

// Log is the file holding Prometheus's output.
func (s *Server) Log() string { return filepath.Join(s.dir, "prometheus.log") }

// Close stops Prometheus and removes its folder.
func (s *Server) Close() {
	if s.proc != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		s.proc.Stop(ctx, 10*time.Second)
		cancel()
	}
	os.RemoveAll(s.dir)
}
