package certrenew_test

import (
	"bytes"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/letsencrypt/challtestsrv"
	"github.com/letsencrypt/pebble/v2/ca"
	"github.com/letsencrypt/pebble/v2/db"
	"github.com/letsencrypt/pebble/v2/va"
	"github.com/letsencrypt/pebble/v2/wfe"

	"github.com/snip/snip-jobs/testbench/acmetest"
)

// testCA is Let's Encrypt's test CA, Pebble, in this process: its ACME
// server behind a wrapper that logs every request (and can answer instead of
// Pebble: 429, 503), its management API (ARI windows), and challtestsrv as
// the DNS server of Pebble's validation authority, answering 127.0.0.1 for
// every name. The VA connects to port 80 of a domain on frontDoor's port,
// which forwards to the instances' challenge servers.
type testCA struct {
	t         testing.TB
	db        *db.MemoryStore
	ca        *ca.CAImpl
	acme      http.Handler
	server    *httptest.Server
	mgmt      *httptest.Server
	dirURL    string
	rootsFile string // PEM of the ACME server's TLS certificate (Options.CARootsFile)
	front     *frontDoor

	// syncChallenges: answer a challenge POST once Pebble's VA has
	// finished, with the challenge's final status. Pebble answers
	// "processing" without Retry-After, and lego then sleeps 5 s (± 50 %)
	// before it looks again; a CA may answer when validation is done (RFC
	// 8555 §7.5.1), which keeps these tests and the benchmark about the
	// renewer rather than about lego's poll interval.
	syncChallenges bool

	mu     sync.Mutex
	events []caEvent
	around hook
}

// hook sees a request before it reaches Pebble: it calls pebble() to pass it
// on (the answer goes into w), or writes its own answer into w instead. The
// client gets the answer once the hook returns.
type hook func(ev *caEvent, w http.ResponseWriter, pebble func())

// caEvent is one request to the ACME server and its answer.
type caEvent struct {
	At       time.Time
	Kind     string   // newOrder, finalize, order (a look at one), challenge, certificate, renewalInfo, newAccount, other
	Domains  []string // newOrder, finalize, challenge
	Replaces string   // newOrder
	Profile  string   // newOrder
	OrderID  string   // finalize
	Status   int
	Problem  string // the problem type of an error answer
}

type caOptions struct {
	profiles    map[string]ca.Profile
	nonceReject string // PEBBLE_WFE_NONCEREJECT: % of good nonces refused; "" = Pebble's default (5)
	asyncChall  bool   // leave Pebble's challenge answers as they are, with Retry-After: 1
}

// pebbleEnv serialises the CAs' construction: Pebble reads its settings from
// the process's environment in va.New and wfe.New (only there), and tests
// that run in parallel want different ones.
var pebbleEnv sync.Mutex

// withPebbleEnv runs f with env set ("" unsets) and puts the environment back.
func withPebbleEnv(env map[string]string, f func()) {
	pebbleEnv.Lock()
	defer pebbleEnv.Unlock()
	for k, v := range env {
		old, had := os.LookupEnv(k)
		if v == "" {
			os.Unsetenv(k)
		} else {
			os.Setenv(k, v)
		}
		defer func() {
			if had {
				os.Setenv(k, old)
			} else {
				os.Unsetenv(k)
			}
		}()
	}
	f()
}

func newTestCA(t testing.TB, o caOptions) *testCA {
	t.Helper()
	quiet := log.New(io.Discard, "", 0)

	dnsAddr := freeAddr(t)
	dns, err := challtestsrv.New(challtestsrv.Config{DNSAddrs: []string{dnsAddr}, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	dns.SetDefaultDNSIPv4("127.0.0.1")
	dns.SetDefaultDNSIPv6("") // or the VA dials ::1
	dns.Run()
	t.Cleanup(dns.Shutdown)
	waitListening(t, dnsAddr)

	front := newFrontDoor(t)
	profiles := o.profiles
	if profiles == nil {
		profiles = map[string]ca.Profile{}
	}
	if _, ok := profiles["default"]; !ok {
		profiles["default"] = ca.Profile{Description: "90 days", ValidityPeriod: 0}
	}
	store := db.NewMemoryStore()
	authority := ca.New(quiet, store, "", "ecdsa", 0, 1, profiles)
	env := map[string]string{
		"PEBBLE_VA_NOSLEEP":      "1",
		"PEBBLE_AUTHZREUSE":      "0", // every order proves control again: the challenge path is always exercised
		"PEBBLE_WFE_NONCEREJECT": o.nonceReject,
	}
	var validator *va.VAImpl
	var fe wfe.WebFrontEndImpl
	withPebbleEnv(env, func() {
		validator = va.New(quiet, front.port(), 0, false, dnsAddr, store)
		fe = wfe.New(quiet, store, validator, authority, []string{"pebble.letsencrypt.org"}, false, false, 0, 0)
	})

	c := &testCA{t: t, db: store, ca: authority, acme: fe.Handler(), front: front, syncChallenges: !o.asyncChall}
	c.server = httptest.NewTLSServer(http.HandlerFunc(c.serve))
	t.Cleanup(c.server.Close)
	c.mgmt = httptest.NewTLSServer(fe.ManagementHandler())
	t.Cleanup(c.mgmt.Close)
	c.dirURL = c.server.URL + wfe.DirectoryPath
	c.rootsFile = filepath.Join(t.TempDir(), "acme-server.pem")
	crt := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.server.Certificate().Raw})
	if err := os.WriteFile(c.rootsFile, crt, 0o600); err != nil {
		t.Fatal(err)
	}
	return c
}

// roots is the pool of Pebble's issuing root, to verify issued chains.
func (c *testCA) roots() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(c.ca.GetRootCert(0).Cert)
	return p
}

func (c *testCA) serve(w http.ResponseWriter, r *http.Request) {
	ev := &caEvent{At: time.Now(), Kind: "other"}
	var body []byte
	if r.Body != nil {
		body, _ = io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	switch p := r.URL.Path; {
	case p == "/order-plz":
		ev.Kind = "newOrder"
		var o struct {
			Identifiers []struct{ Value string } `json:"identifiers"`
			Replaces    string                   `json:"replaces"`
			Profile     string                   `json:"profile"`
		}
		_ = json.Unmarshal(jwsPayload(body), &o)
		for _, id := range o.Identifiers {
			ev.Domains = append(ev.Domains, id.Value)
		}
		ev.Replaces, ev.Profile = o.Replaces, o.Profile
	case p == "/sign-me-up":
		ev.Kind = "newAccount"
	case strings.HasPrefix(p, "/finalize-order/"):
		ev.Kind, ev.OrderID = "finalize", strings.TrimPrefix(p, "/finalize-order/")
		if o := c.db.GetOrderByID(ev.OrderID); o != nil {
			o.RLock()
			for _, id := range o.Identifiers {
				ev.Domains = append(ev.Domains, id.Value)
			}
			ev.Replaces = o.Replaces
			o.RUnlock()
		}
	case strings.HasPrefix(p, "/chalZ/"):
		ev.Kind = "challenge"
		if ch := c.db.GetChallengeByID(strings.TrimPrefix(p, "/chalZ/")); ch != nil {
			ch.RLock()
			az := ch.Authz
			ch.RUnlock()
			az.RLock()
			ev.Domains = []string{az.Identifier.Value}
			az.RUnlock()
		}
	case strings.HasPrefix(p, "/certZ/"):
		ev.Kind = "certificate"
	case strings.HasPrefix(p, "/my-order/"):
		ev.Kind = "order"
	case strings.Contains(p, "renewalInfo"):
		ev.Kind = "renewalInfo"
	}

	c.mu.Lock()
	around := c.around
	c.mu.Unlock()
	rec := httptest.NewRecorder()
	pebble := func() {
		if ev.Kind == "challenge" && r.Method == http.MethodPost && !c.syncChallenges {
			rec.Header().Set("Retry-After", "1")
		}
		c.acme.ServeHTTP(rec, r)
		if ev.Kind == "challenge" && rec.Code == http.StatusOK && c.syncChallenges {
			c.waitValidation(strings.TrimPrefix(r.URL.Path, "/chalZ/"), rec)
		}
	}
	if around != nil {
		around(ev, rec, pebble)
	} else {
		pebble()
	}
	ev.Status = rec.Code
	if rec.Code >= 400 {
		var pd struct{ Type string }
		_ = json.Unmarshal(rec.Body.Bytes(), &pd)
		ev.Problem = pd.Type
	}
	for k, vs := range rec.Header() {
		w.Header()[k] = vs
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())

	c.mu.Lock()
	c.events = append(c.events, *ev)
	c.mu.Unlock()
}

// waitValidation waits for the VA to finish the challenge and rewrites the
// answer with its final status.
func (c *testCA) waitValidation(id string, rec *httptest.ResponseRecorder) {
	acmetest.AnswerWhenValidated(c.db, id, rec, 30*time.Second)
}

// jwsPayload returns the decoded payload of a flattened JWS body.
func jwsPayload(body []byte) []byte {
	var jws struct{ Payload string }
	if json.Unmarshal(body, &jws) != nil {
		return nil
	}
	p, _ := base64.RawURLEncoding.DecodeString(jws.Payload)
	return p
}

// setHook installs a request hook; nil removes it.
func (c *testCA) setHook(h hook) {
	c.mu.Lock()
	c.around = h
	c.mu.Unlock()
}

// log returns the requests of kind (all kinds if ""), oldest first. Requests
// Pebble refused for a bad nonce (it refuses 5 % of good ones on purpose, and
// lego sends them again) are left out.
func (c *testCA) log(kind string) []caEvent {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []caEvent
	for _, e := range c.events {
		if e.Problem == "urn:ietf:params:acme:error:badNonce" {
			continue
		}
		if kind == "" || e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

// ordersFor returns the newOrder requests for domain.
func (c *testCA) ordersFor(domain string) []caEvent {
	var out []caEvent
	for _, e := range c.log("newOrder") {
		if len(e.Domains) == 1 && e.Domains[0] == domain {
			out = append(out, e)
		}
	}
	return out
}

// accountsCreated is how many newAccount requests created an account (201;
// an existing key gets 200).
func (c *testCA) accountsCreated() int {
	n := 0
	for _, e := range c.log("newAccount") {
		if e.Status == http.StatusCreated {
			n++
		}
	}
	return n
}

// setARIWindow makes Pebble's renewal info for the certificate (PEM) suggest
// [start, end), through Pebble's management API.
func (c *testCA) setARIWindow(certPEM []byte, start, end time.Time) {
	c.t.Helper()
	ari, _ := json.Marshal(map[string]any{"suggestedWindow": map[string]string{
		"start": start.UTC().Format(time.RFC3339Nano), "end": end.UTC().Format(time.RFC3339Nano)}})
	body, _ := json.Marshal(map[string]string{"Certificate": string(certPEM), "ARIResponse": string(ari)})
	req, _ := http.NewRequest(http.MethodPost, c.mgmt.URL+"/set-renewal-info/", bytes.NewReader(body))
	req.Header.Set("User-Agent", "certrenew-test")
	resp, err := c.mgmt.Client().Do(req)
	if err != nil {
		c.t.Fatalf("set ARI window: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		c.t.Fatalf("set ARI window: %s: %s", resp.Status, b)
	}
}

// problem answers like an ACME server refusing the request.
func problem(w http.ResponseWriter, status int, typ, detail string, retryAfter string) {
	if retryAfter != "" {
		w.Header().Set("Retry-After", retryAfter)
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"type": typ, "detail": detail, "status": status})
}
