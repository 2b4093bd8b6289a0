package configs

import (
	"fmt"
	"net/url"
	"strings"

	etcdlayout "github.com/snip/snip-jobs/leadership/etcdlease/layout"
)

// readEtcd reads the etcd section: an external cluster (endpoints, with TLS and
// authentication if set) or the embedded member. Settings that apply only to
// the other are refused, and so are plain-HTTP endpoints that would drop TLS or
// send the password in clear text.
func readEtcd(m *mapping) Etcd {
	e := Etcd{EmbeddedDir: DefaultEtcdEmbeddedDir, Prefix: etcdlayout.DefaultPrefix, DialTimeout: DefaultEtcdDialTimeout}
	endpoints, _ := m.strings("endpoints")
	e.Endpoints = etcdEndpoints(m, endpoints)
	external := len(endpoints) > 0
	externalOnly := func(key string) {
		if m.has(key) && !external {
			m.errorf(m.keyPos(key), "etcd.%s applies only to an external etcd cluster; set etcd.endpoints or remove it", key)
		}
	}

	if dir, ok := m.str("embedded_dir"); ok {
		if external {
			m.errorf(m.keyPos("embedded_dir"), "etcd.embedded_dir applies only to the embedded etcd, which is not used when etcd.endpoints is set")
		}
		if absPath(m, "embedded_dir", dir) {
			e.EmbeddedDir = dir
		}
	}
	if prefix, ok := etcdPrefix(m); ok {
		e.Prefix = prefix
	}
	if d, ok := m.duration("dial_timeout", zeroOrPositive); ok && d > 0 {
		e.DialTimeout = d
	}
	externalOnly("tls")
	e.TLS = etcdTLS(m.sub("tls"))
	externalOnly("auth")
	e.Auth = etcdAuth(m.sub("auth"))
	plainEndpoints(m, endpoints)
	m.finish()
	return e
}

// etcdEndpoints returns the endpoints that are good URLs, each once.
func etcdEndpoints(m *mapping, endpoints []item) []string {
	var good []string
	seen := map[string]Pos{}
	for _, ep := range endpoints {
		if msg := checkEndpoint(ep.s); msg != "" {
			m.errorf(ep.pos, "etcd.endpoints: %q %s", ep.s, msg)
			continue
		}
		if first, dup := seen[ep.s]; dup {
			m.errorf(ep.pos, "etcd.endpoints: %q is listed twice (first at line %d)", ep.s, first.Line)
			continue
		}
		seen[ep.s] = ep.pos
		good = append(good, ep.s)
	}
	return good
}

// etcdPrefix reads etcd.prefix without its trailing slashes. ok is false when
// it is absent or bad.
func etcdPrefix(m *mapping) (string, bool) {
	prefix, ok := m.str("prefix")
	if !ok {
		return "", false
	}
	trimmed := strings.TrimRight(prefix, "/")
	switch {
	case !strings.HasPrefix(prefix, "/") || trimmed == "":
		m.errorf(m.valuePos("prefix"), "etcd.prefix %q must start with / and name a key prefix, e.g. /snip-jobs", prefix)
	case strings.ContainsFunc(prefix, func(r rune) bool { return r <= ' ' || r == 0x7f }):
		m.errorf(m.valuePos("prefix"), "etcd.prefix %q must not contain spaces or control characters", prefix)
	default:
		return trimmed, true
	}
	return "", false
}

// etcdTLS reads etcd.tls: absolute paths, cert and key together.
func etcdTLS(tls *mapping) TLS {
	var t TLS
	if ca, ok := tls.str("ca"); ok && absPath(tls, "ca", ca) {
		t.CA = ca
	}
	if cert, ok := tls.str("cert"); ok && absPath(tls, "cert", cert) {
		t.Cert = cert
	}
	if key, ok := tls.str("key"); ok && absPath(tls, "key", key) {
		t.Key = key
	}
	switch {
	case tls.has("cert") && !tls.has("key"):
		tls.errorf(tls.keyPos("cert"), "etcd.tls: cert is set without key; a client certificate needs both")
	case tls.has("key") && !tls.has("cert"):
		tls.errorf(tls.keyPos("key"), "etcd.tls: key is set without cert; a client certificate needs both")
	}
	tls.finish()
	return t
}

// etcdAuth reads etcd.auth: a user with one source for its password, or neither.
func etcdAuth(auth *mapping) Auth {
	var a Auth
	if user, ok := auth.str("user"); ok {
		if user == "" {
			auth.errorf(auth.valuePos("user"), "etcd.auth.user must not be empty")
		}
		a.User = user
	}
	a.PasswordFile, a.PasswordEnv = secretSource(auth, "password_file", "password_env")
	hasPassword := auth.has("password_file") || auth.has("password_env")
	switch {
	case auth.has("user") && !hasPassword:
		auth.errorf(auth.keyPos("user"), "etcd.auth.user is set without a password: set password_file or password_env")
	case !auth.has("user") && hasPassword:
		auth.errorf(auth.at, "etcd.auth has a password but no user: set user")
	}
	auth.finish()
	return a
}

// plainEndpoints refuses http:// endpoints when etcd.tls or etcd.auth is set:
// the etcd client would talk plain HTTP to them, dropping the TLS settings and
// sending the password in clear text, without a word.
func plainEndpoints(m *mapping, endpoints []item) {
	var why []string
	if m.has("tls") {
		why = append(why, fmt.Sprintf("etcd.tls (line %d) would not be used", m.keyPos("tls").Line))
	}
	if m.has("auth") {
		why = append(why, fmt.Sprintf("etcd.auth's password (line %d) would travel in clear text", m.keyPos("auth").Line))
	}
	if len(why) == 0 {
		return
	}
	for _, ep := range endpoints {
		if u, err := url.Parse(ep.s); err == nil && u.Scheme == "http" {
			m.errorf(ep.pos, "etcd.endpoints: %q is plain HTTP, so %s: write https://", ep.s, strings.Join(why, " and "))
		}
	}
}

// checkEndpoint returns what is wrong with an etcd endpoint URL, or "".
func checkEndpoint(ep string) string {
	u, err := url.Parse(ep)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "must be a URL such as https://10.0.0.1:2379"
	}
	if u.Port() == "" {
		return "needs a port, e.g. :2379"
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		return "must be just scheme://host:port"
	}
	return ""
}
