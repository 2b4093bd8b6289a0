package kubelease_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/leadership/kubelease"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/kubetest"
)

// Short timing: an instance is judged gone 3 s after its last renewal was
// seen; its terms stop 1 s before that.
const (
	ttl    = 3 * time.Second
	margin = time.Second
	renew  = 400 * time.Millisecond
)

// namespace creates a namespace for the test on srv, named after it.
func namespace(t *testing.T, srv *kubetest.Server) string {
	t.Helper()
	name := strings.Trim(regexp.MustCompile(`[^a-z0-9]+`).ReplaceAllString(strings.ToLower(t.Name()), "-"), "-")
	if len(name) > 50 {
		name = name[len(name)-50:]
		name = strings.TrimLeft(name, "-")
	}
	cs := clientset(t, srv.Config())
	// A generated suffix lets -count=N run a test again on the same server.
	ns, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: name + "-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func clientset(t *testing.T, cfg *rest.Config) *kubetest.Clientset {
	t.Helper()
	cs, err := kubetest.NewClientset(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// cut makes a client's new requests fail at once while set: the process
// looks crashed (or cut off) to the API server. Watches already open stay.
type cut struct{ on atomic.Bool }

type cutTransport struct {
	rt http.RoundTripper
	c  *cut
}

func (t cutTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if t.c.on.Load() {
		return nil, errors.New("test: cut off")
	}
	return t.rt.RoundTrip(r)
}

type sessionOpt func(*kubelease.Config, *rest.Config)

// cutBy lets the test cut the session's client off.
func cutBy(c *cut) sessionOpt {
	return func(_ *kubelease.Config, rc *rest.Config) {
		rc.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return cutTransport{rt, c} }
	}
}

// onWrite has the session's client send each write (PUT, POST) whose body
// holds marker (a Lease's name, an annotation's: found in JSON or protobuf)
// to the API server whatever its context, and once the answer is in call
// after with the request's context: an error from it is what the client
// gets instead of the answer, as if lost in flight.
func onWrite(marker string, after func(ctx context.Context) error) sessionOpt {
	return func(_ *kubelease.Config, rc *rest.Config) {
		rc.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return lateAnswer{rt, marker, after} }
	}
}

type lateAnswer struct {
	rt     http.RoundTripper
	marker string
	after  func(ctx context.Context) error
}

func (l lateAnswer) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodPut && r.Method != http.MethodPost || r.Body == nil {
		return l.rt.RoundTrip(r)
	}
	sent, err := io.ReadAll(r.Body)
	r.Body.Close()
	if err != nil {
		return nil, err
	}
	r.Body = io.NopCloser(bytes.NewReader(sent))
	if !bytes.Contains(sent, []byte(l.marker)) {
		return l.rt.RoundTrip(r)
	}
	resp, err := l.rt.RoundTrip(r.WithContext(context.WithoutCancel(r.Context())))
	if err != nil {
		return nil, err
	}
	answer, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(answer))
	if err := l.after(r.Context()); err != nil {
		return nil, err
	}
	return resp, nil
}

// asToken authenticates the session with token instead of the admin's.
func asToken(token string) sessionOpt {
	return func(_ *kubelease.Config, rc *rest.Config) { rc.BearerToken = token }
}

// withHost names the session's host (another host's process, as far as
// death reclaim can tell).
func withHost(h string) sessionOpt { return func(c *kubelease.Config, _ *rest.Config) { c.Host = h } }

func withTTL(ttl, margin, renew time.Duration) sessionOpt {
	return func(c *kubelease.Config, _ *rest.Config) { c.TTL, c.Margin, c.RenewInterval = ttl, margin, renew }
}

// start starts a session of instance on srv in ns, ready, closed at the end.
func start(t *testing.T, srv *kubetest.Server, ns, instance string, opts ...sessionOpt) *leadership.Session {
	t.Helper()
	s, _ := startStore(t, srv, ns, instance, opts...)
	return s
}

// startStore is start, with the session's store.
func startStore(t *testing.T, srv *kubetest.Server, ns, instance string, opts ...sessionOpt) (*leadership.Session, *kubelease.Store) {
	t.Helper()
	rc := srv.Config()
	cfg := kubelease.Config{Namespace: ns, Config: leadership.Config{Instance: instance, TTL: ttl, Margin: margin, RenewInterval: renew,
		Logger: benchtest.Logger(t).With("session", instance)}}
	for _, o := range opts {
		o(&cfg, rc)
	}
	cfg.Client = clientset(t, rc).CoordinationV1()
	s, st, err := kubelease.NewTestSession(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*ttl)
		defer cancel()
		s.Close(ctx)
	})
	ctx, cancel := context.WithTimeout(context.Background(), benchtest.Patience)
	defer cancel()
	if err := s.WaitReady(ctx); err != nil {
		t.Fatalf("session %s: %v", instance, err)
	}
	return s, st
}

// campaign runs Campaign on its own goroutine; the term (or error) arrives on the channel.
func campaign(s *leadership.Session, job string) <-chan result {
	ch := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), benchtest.Patience)
		defer cancel()
		t, err := s.Campaign(ctx, job)
		ch <- result{t, err}
	}()
	return ch
}

type result struct {
	t   *leadership.Term
	err error
}

func won(t *testing.T, ch <-chan result) *leadership.Term {
	t.Helper()
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.t
}

// waitWaiting waits until s has a campaign waiting for another holder to go.
func waitWaiting(t *testing.T, s *leadership.Session) {
	t.Helper()
	benchtest.WaitChange(t, "a campaign of "+s.Instance()+" waiting for the holder", s.StatsChanged,
		func() bool { return s.Stats().Waiting > 0 })
}

// waitEnded waits for the term's context to end.
func waitEnded(t *testing.T, term *leadership.Term) {
	t.Helper()
	select {
	case <-term.Context().Done():
	case <-time.After(benchtest.Patience):
		t.Fatalf("term %s/%d did not end", term.Job(), term.Token())
	}
}
