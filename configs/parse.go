package configs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	yamlparser "github.com/goccy/go-yaml/parser"

	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/leadership/kubelease/layout"
)

// Load reads and parses the configuration file at path. A file that cannot be read
// gives an error naming path (errors.Is(err, fs.ErrNotExist) for a missing one);
// problems in the file give Errors.
func Load(path string, types Types) (*File, error) {
	data, err := readFile(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s: config file not found: %w", path, err)
		}
		return nil, fmt.Errorf("%s: cannot read config file: %w", path, err)
	}
	return Parse(path, data, types)
}

// readFile reads at most MaxFileSize bytes past a byte order mark, and one
// more: enough for Parse to say where the file crosses the limit without
// reading a huge file into memory.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, int64(len(utf8BOM)+MaxFileSize+1)))
}

// Parse checks the configuration in data, read from filename (used in positions),
// and returns it with every default filled in. If anything is wrong it returns a
// nil File and Errors listing every problem found, sorted by position.
//
// The file must be UTF-8 (a leading byte order mark is allowed) and at most
// MaxFileSize bytes; its aliases and merge keys may produce at most
// MaxAliasNodes nodes.
func Parse(filename string, data []byte, types Types) (*File, error) {
	f, _, err := parseCounting(filename, data, types)
	return f, err
}

// parseCounting is Parse, also returning how many nodes aliases and merge keys
// produced (for tests).
func parseCounting(filename string, data []byte, types Types) (*File, int, error) {
	data, textErr := checkText(filename, data)
	if textErr != nil {
		return nil, 0, Errors{textErr}
	}
	p := &parser{document: newDocument(filename, &problems{}), types: types}
	f := p.parse(data)
	if len(p.errs) > 0 {
		sortErrors(p.errs)
		return nil, p.budget.spent, dedupe(p.errs)
	}
	return f, p.budget.spent, nil
}

// parser holds the state of one Parse call: the file's YAML document and the
// job types.
type parser struct {
	*document
	types Types
	// backendPos is where leadership.backend's value is written (zero when
	// it is not).
	backendPos Pos
}

func (p *parser) parse(data []byte) *File {
	// Duplicate keys are found by the checks below, which report them all and go
	// on; the library's own check stops at the first.
	tree, err := yamlparser.ParseBytes(data, 0, yamlparser.AllowDuplicateMapKey())
	if err != nil {
		p.syntaxError(err)
		return nil
	}
	var body ast.Node
	for i, doc := range tree.Docs {
		if doc == nil || doc.Body == nil {
			continue
		}
		if i > 0 && body != nil {
			p.errorf(p.pos(doc.Body), "", "only one YAML document is allowed in the file (this one follows a ---)")
			continue
		}
		body = doc.Body
		p.link(doc, map[string]ast.Node{})
	}

	top := p.mapping(body, "", "")
	f := &File{Path: p.file}
	f.Instance = p.instance(top)
	f.Leadership = p.leadership(top.sub("leadership"))
	if f.Leadership.Backend != BackendEtcd && top.has("etcd") {
		top.errorf(top.keyPos("etcd"), "etcd applies only to leadership.backend: etcd, and this file's is %s (line %d): remove this section",
			f.Leadership.Backend, p.backendPos.Line)
	}
	f.Etcd = p.etcd(top.sub("etcd"))
	f.Kubernetes = p.kubernetes(top, f.Leadership.Backend)
	f.Postgres = p.postgres(top.sub("postgres"))
	f.HTTP = p.http(top.sub("http"))
	f.Log = p.log(top.sub("log"))
	f.ShutdownTimeout = DefaultShutdownTimeout
	if d, ok := top.duration("shutdown_timeout", zeroOrPositive); ok && d > 0 {
		f.ShutdownTimeout = d
	}
	f.Jobs = p.jobs(top)
	if f.Leadership.Backend == BackendKubernetes {
		p.leaseNames(top, f)
	}
	top.finish()
	return f
}

// syntaxHints add advice to the YAML library's messages that puzzle people.
var syntaxHints = []struct{ contains, hint string }{
	{"'\t' that cannot start any token", "indent with spaces, not tabs"},
	{"'@' is a reserved character", `quote values that start with @, e.g. cron: "@weekly"`},
	{"'`' is a reserved character", "quote values that start with `"},
}

func (p *parser) syntaxError(err error) {
	var ye yaml.Error
	if !errors.As(err, &ye) {
		p.errorf(Pos{File: p.file}, "", "YAML syntax error: %v", err)
		return
	}
	pos := Pos{File: p.file}
	if tk := ye.GetToken(); tk != nil && tk.Position != nil {
		pos.Line, pos.Col = tk.Position.Line, tk.Position.Column
	}
	msg := ye.GetMessage()
	for _, h := range syntaxHints {
		if strings.Contains(msg, h.contains) {
			msg += " (" + h.hint + ")"
		}
	}
	p.errorf(pos, "", "YAML syntax error: %s", msg)
}

func (p *parser) instance(top *mapping) string {
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

func (p *parser) etcd(m *mapping) Etcd {
	e := Etcd{EmbeddedDir: DefaultEtcdEmbeddedDir, Prefix: leadership.DefaultPrefix, DialTimeout: DefaultEtcdDialTimeout}
	endpoints, _ := m.strings("endpoints")
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
		e.Endpoints = append(e.Endpoints, ep.s)
	}
	external := len(endpoints) > 0
	externalOnly := func(key string) {
		if !external {
			m.errorf(m.keyPos(key), "etcd.%s applies only to an external etcd cluster; set etcd.endpoints or remove it", key)
		}
	}

	if dir, ok := m.str("embedded_dir"); ok {
		if external {
			m.errorf(m.keyPos("embedded_dir"), "etcd.embedded_dir applies only to the embedded etcd, which is not used when etcd.endpoints is set")
		}
		if p.absPath(m, "embedded_dir", dir) {
			e.EmbeddedDir = dir
		}
	}
	if prefix, ok := m.str("prefix"); ok {
		trimmed := strings.TrimRight(prefix, "/")
		switch {
		case !strings.HasPrefix(prefix, "/") || trimmed == "":
			m.errorf(m.valuePos("prefix"), "etcd.prefix %q must start with / and name a key prefix, e.g. /snip-jobs", prefix)
		case strings.ContainsFunc(prefix, func(r rune) bool { return r <= ' ' || r == 0x7f }):
			m.errorf(m.valuePos("prefix"), "etcd.prefix %q must not contain spaces or control characters", prefix)
		default:
			e.Prefix = trimmed
		}
	}
	if d, ok := m.duration("dial_timeout", zeroOrPositive); ok && d > 0 {
		e.DialTimeout = d
	}

	if m.has("tls") {
		externalOnly("tls")
	}
	tls := m.sub("tls")
	if ca, ok := tls.str("ca"); ok && p.absPath(tls, "ca", ca) {
		e.TLS.CA = ca
	}
	if cert, ok := tls.str("cert"); ok && p.absPath(tls, "cert", cert) {
		e.TLS.Cert = cert
	}
	if key, ok := tls.str("key"); ok && p.absPath(tls, "key", key) {
		e.TLS.Key = key
	}
	switch {
	case tls.has("cert") && !tls.has("key"):
		tls.errorf(tls.keyPos("cert"), "etcd.tls: cert is set without key; a client certificate needs both")
	case tls.has("key") && !tls.has("cert"):
		tls.errorf(tls.keyPos("key"), "etcd.tls: key is set without cert; a client certificate needs both")
	}
	tls.finish()

	if m.has("auth") {
		externalOnly("auth")
	}
	auth := m.sub("auth")
	if user, ok := auth.str("user"); ok {
		if user == "" {
			auth.errorf(auth.valuePos("user"), "etcd.auth.user must not be empty")
		}
		e.Auth.User = user
	}
	e.Auth.PasswordFile, e.Auth.PasswordEnv = p.secretSource(auth, "password_file", "password_env")
	hasPassword := auth.has("password_file") || auth.has("password_env")
	switch {
	case auth.has("user") && !hasPassword:
		auth.errorf(auth.keyPos("user"), "etcd.auth.user is set without a password: set password_file or password_env")
	case !auth.has("user") && hasPassword:
		auth.errorf(auth.at, "etcd.auth has a password but no user: set user")
	}
	auth.finish()
	p.plainEndpoints(m, endpoints)
	m.finish()
	return e
}

// plainEndpoints refuses http:// endpoints when etcd.tls or etcd.auth is set:
// the etcd client would talk plain HTTP to them, dropping the TLS settings and
// sending the password in clear text, without a word.
func (p *parser) plainEndpoints(m *mapping, endpoints []item) {
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

// absPath reports whether path (the value of key) is absolute, reporting it if not:
// the service's working directory is not the place to resolve paths against.
func (p *parser) absPath(m *mapping, key, path string) bool {
	if path == "" || !filepath.IsAbs(path) {
		m.errorf(m.valuePos(key), "%s %q must be an absolute path", m.path(key), path)
		return false
	}
	return true
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// secretSource reads a pair of keys naming where a secret is: a file or an
// environment variable, not both. A bad value is not repeated in the message: it
// may be the secret itself, pasted in the wrong place.
func (p *parser) secretSource(m *mapping, fileKey, envKey string) (file, env string) {
	if f, ok := m.str(fileKey); ok {
		if filepath.IsAbs(f) {
			file = f
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

func (p *parser) postgres(m *mapping) Postgres {
	var pg Postgres
	pg.URLFile, pg.URLEnv = p.secretSource(m, "url_file", "url_env")
	if !m.has("url_file") && !m.has("url_env") {
		pg.URLEnv = DefaultDatabaseURLEnv
	}
	pg.MigrateOnStart, _ = m.boolean("migrate_on_start")
	m.finish()
	return pg
}

func (p *parser) leadership(m *mapping) Leadership {
	backend := BackendEtcd
	if b, ok := m.str("backend"); ok {
		p.backendPos = m.valuePos("backend")
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
	ttl, margin, renew = leadership.TimingDefaults(ttl, margin, renew)
	if err := leadership.CheckTiming(ttl, margin, renew); err != nil {
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
	return Leadership{Backend: backend, TTL: ttl, Margin: margin, RenewInterval: renew}
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

func (p *parser) http(m *mapping) HTTP {
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

func (p *parser) log(m *mapping) Log {
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

// kubernetes reads the kubernetes section, which only leadership.backend:
// kubernetes uses: either server with token_file (ca_file optional) and
// namespace, or nothing of those (in the cluster, as the service account).
func (p *parser) kubernetes(top *mapping, backend Backend) Kubernetes {
	k := Kubernetes{Prefix: layout.DefaultPrefix}
	if backend != BackendKubernetes && top.has("kubernetes") {
		said := "etcd, the default"
		if p.backendPos.Line > 0 {
			said = fmt.Sprintf("%s at line %d", backend, p.backendPos.Line)
		}
		top.errorf(top.keyPos("kubernetes"), "kubernetes applies only to leadership.backend: kubernetes (this file's is %s): set it, or remove this section", said)
	}
	m := top.sub("kubernetes")
	if s, ok := m.str("server"); ok {
		if msg := checkKubeServer(s); msg != "" {
			m.errorf(m.valuePos("server"), "kubernetes.server %q %s", s, msg)
		} else {
			k.Server = s
		}
	}
	if f, ok := m.str("token_file"); ok && p.absPath(m, "token_file", f) {
		k.TokenFile = f
	}
	if f, ok := m.str("ca_file"); ok && p.absPath(m, "ca_file", f) {
		k.CAFile = f
	}
	if f, ok := m.str("kubeconfig"); ok && p.absPath(m, "kubeconfig", f) {
		k.Kubeconfig = f
	}
	if c, ok := m.str("context"); ok {
		k.Context = c
	}
	if ns, ok := m.str("namespace"); ok {
		if err := layout.CheckNamespace(ns); err != nil {
			m.errorf(m.valuePos("namespace"), "kubernetes.%s", kubeMsg(err))
		} else {
			k.Namespace = ns
		}
	}
	if prefix, ok := m.str("prefix"); ok {
		if err := layout.CheckPrefix(prefix); err != nil {
			m.errorf(m.valuePos("prefix"), "kubernetes.%s", kubeMsg(err))
		} else {
			k.Prefix = prefix
		}
	}
	if m.has("server") {
		for key, what := range map[string]string{"token_file": "the file holding the bearer token", "namespace": "the namespace of the Leases"} {
			if !m.has(key) {
				m.errorf(m.keyPos("server"), "kubernetes.server is set without %s: name %s (only in the cluster is it the service account's)", key, what)
			}
		}
	}
	for _, key := range []string{"token_file", "ca_file"} {
		if m.has(key) && !m.has("server") {
			m.errorf(m.keyPos(key), "kubernetes.%s applies only with kubernetes.server (in the cluster the service account's is used): set server, or remove it", key)
		}
	}
	if m.has("kubeconfig") && m.has("server") {
		m.errorf(m.keyPos("kubeconfig"), "kubernetes.kubeconfig and kubernetes.server both say how to reach the API server: keep one")
	}
	if m.has("context") && !m.has("kubeconfig") {
		m.errorf(m.keyPos("context"), "kubernetes.context picks a context of kubernetes.kubeconfig: set kubeconfig, or remove it")
	}
	m.finish()
	return k
}

// checkKubeServer returns what is wrong with an API server's URL, or "".
func checkKubeServer(s string) string {
	u, err := url.Parse(s)
	switch {
	case err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http"):
		return "must be a URL such as https://10.0.0.1:6443"
	case u.Scheme != "https":
		return "is plain HTTP, so the bearer token would travel in clear text: write https://"
	case (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil:
		return "must be just https://host:port"
	}
	return ""
}

// leaseNames checks that the instance and the jobs led through terms make
// valid Lease names (package kubelease names a Lease after each).
func (p *parser) leaseNames(top *mapping, f *File) {
	const why = " (leadership.backend: kubernetes names a Lease after it)"
	if f.Instance != "" {
		if err := layout.CheckInstance(f.Kubernetes.Prefix, f.Instance); err != nil {
			if top.has("instance") {
				top.errorf(top.valuePos("instance"), "%s%s", kubeMsg(err), why)
			} else {
				top.errorf(top.at, "instance is not set and the host name cannot be used: %s%s; set instance", kubeMsg(err), why)
			}
		}
	}
	for _, j := range f.Jobs {
		if j.Mode() != ModeLeader || !jobName.MatchString(j.Name) {
			continue
		}
		if err := layout.CheckJob(f.Kubernetes.Prefix, j.Name); err != nil {
			p.errorf(j.Pos, j.Name, "%s%s", kubeMsg(err), why)
		}
	}
}

// kubeMsg is a kubelease error in a config file's words.
func kubeMsg(err error) string { return strings.TrimPrefix(err.Error(), "kubelease: ") }
