package certserve

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/snip/snip-jobs/internal/pglisten"
)

// ChallengePath is where HTTP-01 tokens are served (RFC 8555 §8.3).
const ChallengePath = "/.well-known/acme-challenge/"

// Defaults of a request for a token not in memory (see the package doc).
const (
	DefaultMissWait   = time.Second
	DefaultLoadWait   = 2 * time.Second
	DefaultMaxWaiters = 64
)

// RetryAfter is the Retry-After of a 503 answered before the pending tokens
// were first read: the longest back-off between the reader's connection
// attempts.
const RetryAfter = pglisten.MaxRetry

// Challenges serves HTTP-01 key authorizations that any instance's renewer
// stored, from memory: GET and HEAD of /.well-known/acme-challenge/<token>
// answer the key authorization when the token is held for exactly the
// request's Host (port and case ignored) and has not expired; a token it does
// not hold is 404 once the pending tokens have been read, and 503 with
// Retry-After until then (within the load wait: PostgreSQL has not answered
// since the start, so whether the token exists is unknown); anything that is
// not a challenge request is 404. It is an http.Handler: mount it at
// ChallengePath on the web tier's port 80, or serve it with
// NewChallengeServer. Run keeps it current.
type Challenges struct {
	feed      feed
	log       *slog.Logger
	m         *challengeMetrics
	missWait  time.Duration
	loadWait  time.Duration
	waitSlots chan struct{}
	mu        sync.Mutex
	tokens    map[string]pendingChallenge
	changed   chan struct{} // closed at the next change
	ready     chan struct{}
	readyOnce sync.Once
}

type pendingChallenge struct {
	domain  string
	keyAuth string
	expires time.Time // on this process's monotonic clock
}

// ChallengesOption tunes a request for a token not in memory.
type ChallengesOption func(*Challenges)

// WithMissWait sets how long a request for a token not in memory waits for
// it, and how many requests may wait at once.
func WithMissWait(wait time.Duration, maxWaiters int) ChallengesOption {
	return func(c *Challenges) { c.missWait, c.waitSlots = wait, make(chan struct{}, max(maxWaiters, 0)) }
}

// WithLoadWait sets how long a request that arrives before the pending
// tokens were first read waits for that read (0: not at all) before it is
// answered 503. It shares the waiting slots of WithMissWait.
func WithLoadWait(wait time.Duration) ChallengesOption {
	return func(c *Challenges) { c.loadWait = max(wait, 0) }
}

// NewChallenges makes the handler. Call Run to fill it and keep it current.
func NewChallenges(cfg Config, opts ...ChallengesOption) (*Challenges, error) {
	cfg, err := cfg.check("challenges")
	if err != nil {
		return nil, err
	}
	c := &Challenges{log: cfg.Log, m: newChallengeMetrics(cfg.Metrics), missWait: DefaultMissWait, loadWait: DefaultLoadWait,
		waitSlots: make(chan struct{}, DefaultMaxWaiters), tokens: map[string]pendingChallenge{},
		changed: make(chan struct{}), ready: make(chan struct{})}
	for _, o := range opts {
		o(c)
	}
	c.feed = feed{cfg: cfg, channel: "certrenew_challenges", m: newFeedMetrics(cfg.Metrics, "challenges"),
		load: c.load, apply: c.apply, loaded: func() { c.readyOnce.Do(func() { close(c.ready) }) }}
	return c, nil
}

// Run reads every pending token, then follows the renewer's changes until
// ctx ends. It returns ctx's error.
func (c *Challenges) Run(ctx context.Context) error { return c.feed.run(ctx) }

// Ready is closed once every pending token has been read.
func (c *Challenges) Ready() <-chan struct{} { return c.ready }

// load reads every token that has not expired.
func (c *Challenges) load(ctx context.Context, conn *pgx.Conn) error {
	rows, err := conn.Query(ctx, `SELECT token, domain, key_auth, extract(epoch FROM expires_at - now())::float8
		FROM certrenew_challenges WHERE expires_at > now()`)
	if err != nil {
		return err
	}
	now := time.Now()
	next := map[string]pendingChallenge{}
	var token string
	var p pendingChallenge
	var ttl float64
	_, err = pgx.ForEachRow(rows, []any{&token, &p.domain, &p.keyAuth, &ttl}, func() error {
		p.expires = now.Add(seconds(ttl))
		next[token] = p
		return nil
	})
	if err != nil {
		return err
	}
	c.update(func(m map[string]pendingChallenge) map[string]pendingChallenge { return next })
	return nil
}

// challengeNotice is the JSON a trigger sends (migration 0011).
type challengeNotice struct {
	Op      string  `json:"op"` // set, delete
	Token   string  `json:"token"`
	Domain  string  `json:"domain"`
	KeyAuth string  `json:"key_auth"`
	TTL     float64 `json:"ttl"` // seconds left, on the database's clock
}

// apply takes one notification: the row is in it, nothing is queried.
func (c *Challenges) apply(ctx context.Context, _ *pgx.Conn, payload string) error {
	var n challengeNotice
	if err := json.Unmarshal([]byte(payload), &n); err != nil || n.Token == "" {
		c.log.WarnContext(ctx, "certserve: a challenge notification that is not the trigger's; ignored", "payload", payload, "err", err)
		return nil
	}
	expires := time.Now().Add(seconds(n.TTL))
	c.update(func(m map[string]pendingChallenge) map[string]pendingChallenge {
		if n.Op == "delete" {
			delete(m, n.Token)
		} else {
			m[n.Token] = pendingChallenge{domain: n.Domain, keyAuth: n.KeyAuth, expires: expires}
		}
		return m
	})
	return nil
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// update changes the tokens under the lock and wakes waiting requests.
func (c *Challenges) update(f func(map[string]pendingChallenge) map[string]pendingChallenge) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tokens = f(c.tokens)
	c.m.pending.Set(float64(len(c.tokens)))
	close(c.changed)
	c.changed = make(chan struct{})
}

// lookup returns token's key authorization for host, and a channel closed
// at the next change (to wait on when not found).
func (c *Challenges) lookup(token, host string) (keyAuth string, ok bool, changed <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, found := c.tokens[token]
	if found && p.domain == host && time.Now().Before(p.expires) {
		return p.keyAuth, true, nil
	}
	return "", false, c.changed
}

// ServeHTTP answers one HTTP-01 request.
func (c *Challenges) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	token, ok := strings.CutPrefix(r.URL.Path, ChallengePath)
	host := requestHost(r.Host)
	if !ok || (r.Method != http.MethodGet && r.Method != http.MethodHead) || !validToken(token) || host == "" {
		c.m.requests.WithLabelValues("refused").Inc()
		http.NotFound(w, r)
		return
	}
	keyAuth, found := c.find(r.Context(), token, host)
	switch found {
	case notRead:
		c.m.requests.WithLabelValues("unavailable").Inc()
		c.log.DebugContext(r.Context(), "challenge request before the pending tokens could be read: answered 503", "domain", host, "token", token)
		w.Header().Set("Retry-After", strconv.Itoa(int(RetryAfter/time.Second)))
		w.Header().Set("Cache-Control", "no-store")
		http.Error(w, "the HTTP-01 tokens have not been read yet: try again", http.StatusServiceUnavailable)
		return
	case unknown:
		c.m.requests.WithLabelValues("unknown").Inc()
		c.log.DebugContext(r.Context(), "challenge not found", "domain", host, "token", token)
		http.NotFound(w, r)
		return
	}
	c.m.requests.WithLabelValues("answered").Inc()
	c.log.InfoContext(r.Context(), "challenge answered", "domain", host)
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write([]byte(keyAuth))
}

// finding is what find found.
type finding int

const (
	found   finding = iota
	unknown         // not held, the pending tokens read: 404
	notRead         // not held, the pending tokens never read yet: 503
)

// find looks token up; not found, it waits up to missWait for it to arrive,
// if a waiting slot is free (the CA's request may overtake the notification).
// Before the pending tokens have first been read (just after a restart), a
// miss means nothing yet: it waits for that read first, up to loadWait, and
// if the read has not come by then (PostgreSQL has not answered since the
// start) the token is notRead, which the caller answers at once — never a
// wait as long as the database's silence.
func (c *Challenges) find(ctx context.Context, token, host string) (string, finding) {
	keyAuth, ok, _ := c.lookup(token, host)
	if ok {
		return keyAuth, found
	}
	miss := unknown
	if !c.isReady() {
		miss = notRead
	}
	if (miss == unknown && c.missWait <= 0) || (miss == notRead && c.loadWait <= 0) {
		return "", miss
	}
	select {
	case c.waitSlots <- struct{}{}:
		defer func() { <-c.waitSlots }()
	default:
		c.m.waitsRefused.Inc()
		return "", miss
	}
	if miss == notRead {
		timer := time.NewTimer(c.loadWait)
		select {
		case <-c.ready:
			timer.Stop()
		case <-timer.C:
			return "", notRead
		case <-ctx.Done():
			timer.Stop()
			return "", notRead
		}
		if keyAuth, ok, _ := c.lookup(token, host); ok {
			return keyAuth, found
		}
		if c.missWait <= 0 {
			return "", unknown
		}
	}
	timer := time.NewTimer(c.missWait)
	defer timer.Stop()
	for {
		keyAuth, ok, changed := c.lookup(token, host)
		if ok {
			c.m.waitsAnswered.Inc()
			return keyAuth, found
		}
		select {
		case <-changed:
		case <-timer.C:
			return "", unknown
		case <-ctx.Done():
			return "", unknown
		}
	}
}

// isReady reports whether the pending tokens have been read at least once.
func (c *Challenges) isReady() bool {
	select {
	case <-c.ready:
		return true
	default:
		return false
	}
}

// validToken: RFC 8555 tokens are base64url without padding; at least 128
// bits of entropy (22 characters), and we accept up to 256.
func validToken(t string) bool {
	if len(t) < 16 || len(t) > 256 {
		return false
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// requestHost is the Host header without port, lower case; "" if it is not a
// name.
func requestHost(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	h = strings.ToLower(h)
	if h == "" || strings.ContainsAny(h, "/[]@ ") {
		return ""
	}
	return h
}

type challengeMetrics struct {
	pending                     prometheus.Gauge
	requests                    *prometheus.CounterVec
	waitsAnswered, waitsRefused prometheus.Counter
}

func newChallengeMetrics(reg prometheus.Registerer) *challengeMetrics {
	m := &challengeMetrics{
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "snip_certserve_challenges_pending",
			Help: "HTTP-01 tokens held in memory."}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "snip_certserve_challenge_requests_total",
			Help: "HTTP-01 requests: answered, unknown (no such token for the host), unavailable (503: the tokens never read yet), refused (not a challenge request)."}, []string{"result"}),
		waitsAnswered: prometheus.NewCounter(prometheus.CounterOpts{Name: "snip_certserve_challenge_waits_answered_total",
			Help: "Requests that found their token only after waiting for its notification (the CA overtook it)."}),
		waitsRefused: prometheus.NewCounter(prometheus.CounterOpts{Name: "snip_certserve_challenge_waits_refused_total",
			Help: "Requests for an unknown token answered at once (404, or 503 before the tokens were read) because every waiting slot was taken."}),
	}
	if reg != nil {
		reg.MustRegister(m.pending, m.requests, m.waitsAnswered, m.waitsRefused)
	}
	return m
}
