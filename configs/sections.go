package configs

import (
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/snip/snip-jobs/leadership"
	etcdlayout "github.com/snip/snip-jobs/leadership/etcdlease/layout"
	kubelayout "github.com/snip/snip-jobs/leadership/kubelease/layout"
)

// The readers of the file's small sections: each reads its mapping into the
// section's type with the defaults filled in, reports every bad value at its
// line, and finishes the mapping (so an unknown key is reported too). The etcd
// and kubernetes sections have their own files; the jobs list has jobs.go.

// readInstance reads instance, defaulting to the host name; both must be
// usable in etcd keys.
func readInstance(top *mapping) string {
	if name, ok := top.str("instance"); ok {
		if err := checkInstance(name); err != "" {
			top.errorf(top.valuePos("instance"), "instance %q: %s", name, err)
		}
		return name
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		top.errorf(top.keyPos("instance"), "instance is not set and the host name is unknown (%v): set instance", err)
		return ""
	}
	if msg := checkInstance(host); msg != "" {
		top.errorf(top.keyPos("instance"), "instance is not set and the host name %q cannot be used: %s; set instance", host, msg)
	}
	return host
}

// checkInstance applies the rule of package leadership, which puts the name in
// etcd keys.
func checkInstance(name string) string {
	if name == "" {
		return "must not be empty (leave instance out to use the host name)"
	}
	for _, r := range name {
		if r == '/' || r <= ' ' || r == 0x7f {
			return "use letters, digits, '-', '_' or '.' (no '/', spaces or control characters)"
		}
	}
	return ""
}

// readLeadership reads the leadership section, its timing checked by
// leadership.CheckTiming. backendPos is where backend's value is written (zero
// when it is not), for messages about sections that depend on it.
func readLeadership(m *mapping) (l Leadership, backendPos Pos) {
	backend := BackendEtcd
	if b, ok := m.str("backend"); ok {
		backendPos = m.valuePos("backend")
		switch Backend(b) {
		case BackendEtcd, BackendKubernetes:
			backend = Backend(b)
		default:
			m.errorf(m.valuePos("backend"), "leadership.backend %q must be etcd or kubernetes", b)
		}
	}
	ttl, _ := m.duration("ttl", zeroOrPositive)
	margin, _ := m.duration("margin", zeroOrPositive)
	renew, _ := m.duration("renew_interval", zeroOrPositive)
	written := map[string]bool{"ttl": ttl > 0, "margin": margin > 0, "renew_interval": renew > 0} // 0: the default
	rules := etcdlayout.Rules
	if backend == BackendKubernetes {
		rules = kubelayout.Rules
	}
	ttl, margin, renew = leadership.TimingDefaults(rules, ttl, margin, renew)
	if err := leadership.CheckTiming(rules, ttl, margin, renew); err != nil {
		for _, e := range splitErrors(err) {
			pos := m.at // every value to blame came from a default: the section
			for _, key := range timingBlame(e) {
				if written[key] {
					pos = m.valuePos(key)
					break
				}
			}
			m.errorf(pos, "%s", e)
		}
	}
	m.finish()
	return Leadership{Backend: backend, TTL: ttl, Margin: margin, RenewInterval: renew}, backendPos
}

// timingBlame returns the keys a problem reported by leadership.CheckTiming is
// about, the one it names first: the TTL's own problems are the TTL's; a
// margin not less than the TTL is the margin's (a default margin is always
// less), then the TTL's; too little room for two keep-alives is the renew
// interval's, then the margin's, then the TTL's. The message is reported at
// the first of them written in the file.
func timingBlame(msg string) []string {
	switch {
	case strings.HasPrefix(msg, "leadership: TTL "):
		return []string{"ttl"}
	case strings.HasPrefix(msg, "leadership: stop-early margin "):
		return []string{"margin", "ttl"}
	case strings.HasPrefix(msg, "leadership: renew interval "):
		return []string{"renew_interval", "margin", "ttl"}
	}
	return nil
}

// splitErrors returns the messages of a joined error one by one.
func splitErrors(err error) []string {
	var out []string
	for _, e := range splitErrorValues(err) {
		out = append(out, e.Error())
	}
	return out
}

// readPostgres reads where the database URL is found (by default the
// environment variable DefaultDatabaseURLEnv).
func readPostgres(m *mapping) Postgres {
	var pg Postgres
	pg.URLFile, pg.URLEnv = secretSource(m, "url_file", "url_env")
	if !m.has("url_file") && !m.has("url_env") {
		pg.URLEnv = DefaultDatabaseURLEnv
	}
	pg.MigrateOnStart, _ = m.boolean("migrate_on_start")
	m.finish()
	return pg
}

// readHTTP reads the admin listener and the host names it accepts (lower case,
// no final dot, each once).
func readHTTP(m *mapping) HTTP {
	h := HTTP{Listen: DefaultHTTPListen}
	if listen, ok := m.str("listen"); ok {
		if msg := checkListen(listen); msg != "" {
			m.errorf(m.valuePos("listen"), "http.listen %q %s", listen, msg)
		} else {
			h.Listen = listen
		}
	}
	hosts, _ := m.strings("allowed_hosts")
	seen := map[string]int{}
	for _, it := range hosts {
		name := strings.ToLower(strings.TrimSuffix(it.s, "."))
		switch {
		case net.ParseIP(strings.Trim(name, "[]")) != nil:
			m.errorf(it.pos, "http.allowed_hosts: %q is an IP address, and IP addresses are always accepted: list host names only", it.s)
		case name == "localhost" || strings.HasSuffix(name, ".localhost"):
			m.errorf(it.pos, "http.allowed_hosts: %q is a loopback name, always accepted: list the other names of this server", it.s)
		case !hostNamePattern.MatchString(name) || len(name) > 253:
			m.errorf(it.pos, "http.allowed_hosts: %q must be a host name such as snip-1.internal (no scheme, port or wildcard)", it.s)
		case seen[name] > 0:
			m.errorf(it.pos, "http.allowed_hosts: %q is listed twice (first at line %d)", it.s, seen[name])
		default:
			seen[name] = it.pos.Line
			h.AllowedHosts = append(h.AllowedHosts, name)
		}
	}
	m.finish()
	return h
}

// hostNamePattern is a DNS name: dot-separated labels of letters, digits and
// hyphens, none starting or ending with a hyphen.
var hostNamePattern = regexp.MustCompile(`^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$`)

func checkListen(addr string) string {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "must be host:port, e.g. 127.0.0.1:9469 (or :9469 for every interface)"
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return "has a bad port: use a number from 0 to 65535"
	}
	return ""
}

var logLevels = map[string]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError}

// readLog reads the log format and level.
func readLog(m *mapping) Log {
	l := Log{Format: LogAuto, Level: slog.LevelInfo}
	if format, ok := m.str("format"); ok {
		switch f := LogFormat(format); f {
		case LogAuto, LogText, LogJSON:
			l.Format = f
		default:
			m.errorf(m.valuePos("format"), "log.format %q must be auto, text or json", format)
		}
	}
	if level, ok := m.str("level"); ok {
		if lv, known := logLevels[level]; known {
			l.Level = lv
		} else {
			m.errorf(m.valuePos("level"), "log.level %q must be debug, info, warn or error", level)
		}
	}
	m.finish()
	return l
}

// absPath reports whether path (the value of key) is absolute, reporting it if not:
// the service's working directory is not the place to resolve paths against.
func absPath(m *mapping, key, path string) bool {
	if path == "" || !filepath.IsAbs(path) {
		m.errorf(m.valuePos(key), "%s %q must be an absolute path", m.path(key), path)
		return false
	}
	m.notePath(key)
	return true
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// secretSource reads a pair of keys naming where a secret is: a file or an
// environment variable, not both. A bad value is not repeated in the message: it
// may be the secret itself, pasted in the wrong place.
func secretSource(m *mapping, fileKey, envKey string) (file, env string) {
	if f, ok := m.str(fileKey); ok {
		if filepath.IsAbs(f) {
			file = f
			m.notePath(fileKey)
		} else {
			m.errorf(m.valuePos(fileKey), "%s must be the absolute path of a file holding the secret", m.path(fileKey))
		}
	}
	if e, ok := m.str(envKey); ok {
		if envName.MatchString(e) {
			env = e
		} else {
			m.errorf(m.valuePos(envKey), "%s must be the name of an environment variable holding the secret (letters, digits, _)", m.path(envKey))
		}
	}
	if m.has(fileKey) && m.has(envKey) {
		first, second := fileKey, envKey
		if comparePos(m.keyPos(second), m.keyPos(first)) < 0 {
			first, second = second, first
		}
		m.errorf(m.keyPos(second), "%s (line %d) and %s are both set: choose one",
			m.path(first), m.keyPos(first).Line, m.path(second))
	}
	return file, env
}
