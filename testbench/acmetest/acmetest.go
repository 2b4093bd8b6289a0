// Package acmetest runs Let's Encrypt's test CA, Pebble, inside this process,
// for harnesses that drive real snip-jobs processes against a real ACME
// server (the fault-injection suite in testbench/chaos). The certificate renewer's own
// tests keep their richer CA in jobs/certrenew (hooks, ARI windows).
//
// What Start gives: Pebble's ACME server on an https loopback URL (its TLS
// certificate written to RootsFile, for the renewer's ca_roots_file), every
// authorization validated again (no reuse), challtestsrv as the validation
// authority's DNS server resolving every name to 127.0.0.1 (and no IPv6, so
// validation never dials ::1), and a front door: the TCP port the validation
// authority dials for HTTP-01, which forwards each connection to the next
// target that accepts one (round robin over Route's addresses; a dead target
// is skipped). A challenge POST is answered once validation has finished, as a
// CA may (RFC 8555 §7.5.1), so that lego does not sleep 5 s between polls.
//
// What it does not give: rate limits, persistence (Pebble's store is in
// memory), or isolation between two CAs in one process for the environment
// variables below. Start sets PEBBLE_VA_NOSLEEP=1 and PEBBLE_AUTHZREUSE=0 in
// the process environment, which Pebble reads when it is constructed.
package acmetest

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/letsencrypt/challtestsrv"
	"github.com/letsencrypt/pebble/v2/ca"
	"github.com/letsencrypt/pebble/v2/db"
	"github.com/letsencrypt/pebble/v2/va"
	"github.com/letsencrypt/pebble/v2/wfe"
	"github.com/snip/snip-jobs/testbench/freeport"
)

// Profile is the ACME profile the CA offers (90-day certificates); the
// renewer must name it (Pebble picks one at random otherwise).
const Profile = "default"

// validationWait bounds how long a challenge POST waits for validation.
const validationWait = 30 * time.Second

// CA is a running Pebble.
type CA struct {
	// DirectoryURL is the ACME directory (https).
	DirectoryURL string
	// RootsFile holds the PEM certificate of the ACME server's TLS listener.
	RootsFile string
	// IssuerRoot is the root the CA issues certificates under: what a TLS
	// client of the issued certificates trusts. IssuerRootFile holds it (PEM),
	// for curl --cacert.
	IssuerRoot     *x509.Certificate
	IssuerRootFile string

	store  *db.MemoryStore
	acme   http.Handler
	server *httptest.Server
	dns    *challtestsrv.ChallSrv
	front  *frontDoor

	mu     sync.Mutex
	issued map[string]int // finalized orders answered 200, by domain
}

// Start starts the CA. dir receives RootsFile. Close stops it.
func Start(dir string) (_ *CA, err error) {
	if err := os.Setenv("PEBBLE_VA_NOSLEEP", "1"); err != nil {
		return nil, err
	}
	if err := os.Setenv("PEBBLE_AUTHZREUSE", "0"); err != nil {
		return nil, err
	}
	quiet := log.New(io.Discard, "", 0)
	dnsAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	dns, err := challtestsrv.New(challtestsrv.Config{DNSAddrs: []string{dnsAddr}, Log: quiet})
	if err != nil {
		return nil, fmt.Errorf("acmetest: DNS server: %w", err)
	}
	dns.SetDefaultDNSIPv4("127.0.0.1")
	dns.SetDefaultDNSIPv6("")
	dns.Run()
	c := &CA{dns: dns, issued: map[string]int{}}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	if err := waitListening(dnsAddr); err != nil {
		return nil, err
	}
	if c.front, err = newFrontDoor(); err != nil {
		return nil, err
	}
	c.store = db.NewMemoryStore()
	profiles := map[string]ca.Profile{Profile: {Description: "90 days"}}
	authority := ca.New(quiet, c.store, "", "ecdsa", 0, 1, profiles)
	validator := va.New(quiet, c.front.port(), 0, false, dnsAddr, c.store)
	fe := wfe.New(quiet, c.store, validator, authority, []string{"pebble.letsencrypt.org"}, false, false, 0, 0)
	c.acme = fe.Handler()
	c.server = httptest.NewTLSServer(http.HandlerFunc(c.serve))
	c.DirectoryURL = c.server.URL + wfe.DirectoryPath
	c.RootsFile = filepath.Join(dir, "acme-server.pem")
	crt := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.server.Certificate().Raw})
	if err := os.WriteFile(c.RootsFile, crt, 0o600); err != nil {
		return nil, err
	}
	c.IssuerRoot = authority.GetRootCert(0).Cert
	c.IssuerRootFile = filepath.Join(dir, "issuer-root.pem")
	root := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.IssuerRoot.Raw})
	if err := os.WriteFile(c.IssuerRootFile, root, 0o644); err != nil {
		return nil, err
	}
	return c, nil
}

// IssuerRoots is a pool holding IssuerRoot only.
func (c *CA) IssuerRoots() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(c.IssuerRoot)
	return p
}

// Route sets the addresses (host:port) the front door forwards HTTP-01
// validation connections to: every instance's challenge listener.
func (c *CA) Route(addrs ...string) { c.front.route(addrs) }

// Issued returns how many certificates the CA issued for each domain (one per
// finalized order).
func (c *CA) Issued() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.issued))
	for d, n := range c.issued {
		out[d] = n
	}
	return out
}

// Close stops the CA, its DNS server and its front door.
func (c *CA) Close() {
	if c.server != nil {
		c.server.Close()
	}
	if c.front != nil {
		c.front.close()
	}
	if c.dns != nil {
		c.dns.Shutdown()
	}
}

func (c *CA) serve(w http.ResponseWriter, r *http.Request) {
	rec := httptest.NewRecorder()
	c.acme.ServeHTTP(rec, r)
	switch p := r.URL.Path; {
	case strings.HasPrefix(p, "/chalZ/") && r.Method == http.MethodPost && rec.Code == http.StatusOK:
		c.waitValidation(strings.TrimPrefix(p, "/chalZ/"), rec)
	case strings.HasPrefix(p, "/finalize-order/") && rec.Code == http.StatusOK:
		if o := c.store.GetOrderByID(strings.TrimPrefix(p, "/finalize-order/")); o != nil {
			o.RLock()
			c.mu.Lock()
			for _, id := range o.Identifiers {
				c.issued[id.Value]++
			}
			c.mu.Unlock()
			o.RUnlock()
		}
	}
	for k, vs := range rec.Header() {
		w.Header()[k] = vs
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

// waitValidation waits for the validation authority to finish the challenge
// and rewrites Pebble's "processing" answer with the final status.
func (c *CA) waitValidation(id string, rec *httptest.ResponseRecorder) {
	AnswerWhenValidated(c.store, id, rec, validationWait)
}

// AnswerWhenValidated waits (up to wait) for Pebble's validation authority to
// finish challenge id, then rewrites the challenge POST's recorded answer —
// Pebble's "processing" — with the final status and error. A CA may answer so
// (RFC 8555 §7.5.1); it spares lego its 5 s poll when the answer has no
// Retry-After.
func AnswerWhenValidated(store *db.MemoryStore, id string, rec *httptest.ResponseRecorder, wait time.Duration) {
	ch := store.GetChallengeByID(id)
	if ch == nil {
		return
	}
	var status string
	var prob any
	for deadline := time.Now().Add(wait); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		ch.RLock()
		status = ch.Status
		if ch.Error != nil {
			prob = ch.Error
		}
		ch.RUnlock()
		if status != "processing" && status != "pending" {
			break
		}
	}
	var m map[string]any
	if json.Unmarshal(rec.Body.Bytes(), &m) != nil {
		return
	}
	m["status"] = status
	if prob != nil {
		m["error"] = prob
	}
	b, _ := json.Marshal(m)
	rec.Body.Reset()
	rec.Body.Write(b)
}

// AnswerWhenIssued waits (up to wait) for Pebble to issue order id's
// certificate, then rewrites the finalize POST's recorded answer — Pebble's
// "processing" — as the valid order with its certificate's URL: the answer of
// a CA that issues before it answers (as Let's Encrypt usually does), after
// which lego downloads the certificate at once instead of polling the order.
// A finalize Pebble refused (a bad nonce, which lego sends again) is left as
// it is.
func AnswerWhenIssued(store *db.MemoryStore, id string, rec *httptest.ResponseRecorder, wait time.Duration) {
	o := store.GetOrderByID(id)
	if o == nil || rec.Code != http.StatusOK {
		return
	}
	var certID string
	for deadline := time.Now().Add(wait); time.Now().Before(deadline) && certID == ""; time.Sleep(time.Millisecond) {
		o.RLock()
		if o.CertificateObject != nil {
			certID = o.CertificateObject.ID
		}
		o.RUnlock()
	}
	var m map[string]any
	if certID == "" || json.Unmarshal(rec.Body.Bytes(), &m) != nil {
		return
	}
	finalize, _ := m["finalize"].(string)
	base, _, ok := strings.Cut(finalize, "/finalize-order/")
	if !ok {
		return
	}
	m["status"], m["certificate"] = "valid", base+"/certZ/"+certID
	b, _ := json.Marshal(m)
	rec.Body.Reset()
	rec.Body.Write(b)
}

// frontDoor is a layer-4 forwarder: each connection goes to the next target
// that accepts it.
type frontDoor struct {
	ln      net.Listener
	mu      sync.Mutex
	targets []string
	next    int
}

func newFrontDoor() (*frontDoor, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("acmetest: front door: %w", err)
	}
	f := &frontDoor{ln: ln}
	go f.accept()
	return f, nil
}

func (f *frontDoor) port() int { return f.ln.Addr().(*net.TCPAddr).Port }
func (f *frontDoor) close()    { f.ln.Close() }

func (f *frontDoor) route(addrs []string) {
	f.mu.Lock()
	f.targets, f.next = append([]string(nil), addrs...), 0
	f.mu.Unlock()
}

// pick returns the targets in the order to try for one connection.
func (f *frontDoor) pick() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(f.targets)
	out := make([]string, 0, n)
	for i := range n {
		out = append(out, f.targets[(f.next+i)%n])
	}
	f.next++
	return out
}

func (f *frontDoor) accept() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			var u net.Conn
			for _, t := range f.pick() {
				var err error
				if u, err = net.DialTimeout("tcp", t, time.Second); err == nil {
					break
				}
			}
			if u == nil {
				return
			}
			defer u.Close()
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(u, c); done <- struct{}{} }()
			go func() { _, _ = io.Copy(c, u); done <- struct{}{} }()
			<-done
		}()
	}
}

// freeAddr is a loopback address for the DNS server, on a port below the
// kernel's ephemeral range (freeport): one in the range can be handed to
// another process's outgoing connection between this check and the server's
// listen, or be dialled by a connection to itself, and the validator then
// finds no DNS server there (seen with three test binaries at once).
func freeAddr() (string, error) {
	port, err := freeport.Port()
	if err != nil {
		return "", fmt.Errorf("acmetest: free port: %w", err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
}

func waitListening(addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			c.Close()
			return nil
		}
		if ctx.Err() != nil {
			return errors.Join(fmt.Errorf("acmetest: %s does not accept connections", addr), err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
