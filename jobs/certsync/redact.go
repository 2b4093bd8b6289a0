package certsync

import (
	"bytes"
	"cmp"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// redacted replaces what the redactor withholds.
const redacted = "[REDACTED]"

// redactor withholds secrets from the text the job logs without having
// written it: the reload command's output, and its arguments. It replaces
// every secret value the job knows (see knownSecrets) and whatever looks
// like one (secretPatterns).
type redactor struct {
	secrets [][]byte // longest first
	longest int
}

// secretPatterns are what looks like a secret in a command's output: the
// part each one's group (0: the whole match) is replaced.
var secretPatterns = []struct {
	re    *regexp.Regexp
	group int
}{
	// A URL's userinfo: postgres://user:password@host/...
	{regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://([^\s/?#]*)@`), 1},
	// NAME=value or name: value, NAME saying it is a secret (the
	// environment, a `set -x` trace, a libpq DSN, a YAML line).
	{regexp.MustCompile(`(?i)[A-Za-z0-9_.-]*(?:passw(?:or)?d|secret|token|credential|keys?|database_url|dsn)[A-Za-z0-9_.-]*[ \t]*[=:][ \t]*("[^"\n]*"|'[^'\n]*'|[^\s"']+)`), 1},
	// A PEM private key, up to its end or the end of what was kept.
	{regexp.MustCompile(`-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?s:.*?)(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\z)`), 0},
}

// secretName is an environment variable whose name says it holds a secret.
var secretName = regexp.MustCompile(`(?i)passw(or)?d|secret|token|credential|keys?$|database_url|dsn`)

// minGuessed is the shortest value taken as a secret on a name's word alone
// (secretName): a shorter one would blank out ordinary text.
const minGuessed = 8

// knownSecrets are the secret values the job can tell: the database
// password (password, as pgx parsed it from the URL), the lines of
// key_env's variable or key_file, and the values of the service's
// environment variables whose name says they hold one (the etcd password,
// a token: the job is not told which variables the config reads them
// from), with the password of any URL among them.
func knownSecrets(password string, o Options) []string {
	var out []string
	add := func(s string, minLen int) {
		if s = strings.TrimSpace(s); len(s) >= minLen {
			out = append(out, s)
		}
	}
	if password != "" {
		add(password, 1)
		add(url.PathEscape(password), 1)
		add(url.QueryEscape(password), 1)
	}
	b, _, _ := o.KeySource().Text() // loaded already; a failure here only loses this
	keys := string(b)
	add(keys, 1)
	for _, line := range strings.Split(keys, "\n") {
		if line = strings.TrimSpace(line); !strings.HasPrefix(line, "#") {
			add(line, 1)
		}
	}
	for _, kv := range os.Environ() {
		name, value, _ := strings.Cut(kv, "=")
		if name == o.KeyEnv || secretName.MatchString(name) {
			add(value, minGuessed)
		}
		if u, err := url.Parse(strings.TrimSpace(value)); err == nil && u.User != nil {
			if p, ok := u.User.Password(); ok {
				add(p, 1)
			}
		}
	}
	return out
}

func newRedactor(secrets []string) *redactor {
	r := &redactor{}
	for _, s := range secrets {
		if s != "" && !slices.ContainsFunc(r.secrets, func(b []byte) bool { return string(b) == s }) {
			r.secrets = append(r.secrets, []byte(s))
			r.longest = max(r.longest, len(s))
		}
	}
	slices.SortFunc(r.secrets, func(a, b []byte) int { return cmp.Compare(len(b), len(a)) })
	return r
}

// capture is how much of a command's output must be kept for redact to
// show limit bytes of it: a secret that starts within limit is then whole.
func (r *redactor) capture(limit int) int { return limit + max(r.longest, 4<<10) }

// redact returns raw with every secret replaced, cut after limit bytes of
// raw (and at most limit bytes of output), and whether it was cut. Spans
// are found in raw as a whole before anything is cut, so a cut never
// leaves part of a secret: a secret that starts before the cut is
// replaced whole.
func (r *redactor) redact(raw []byte, limit int) (string, bool) {
	type span struct{ from, to int }
	var spans []span
	for _, s := range r.secrets {
		for i := 0; ; {
			k := bytes.Index(raw[i:], s)
			if k < 0 {
				break
			}
			spans = append(spans, span{i + k, i + k + len(s)})
			i += k + 1
		}
	}
	for _, p := range secretPatterns {
		for _, m := range p.re.FindAllSubmatchIndex(raw, -1) {
			if from, to := m[2*p.group], m[2*p.group+1]; from >= 0 && to > from {
				spans = append(spans, span{from, to})
			}
		}
	}
	slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(a.from, b.from) })
	var out strings.Builder
	at, cut := 0, false
	for at < len(raw) {
		if at >= limit || out.Len() >= limit {
			cut = true
			break
		}
		for len(spans) > 0 && spans[0].to <= at {
			spans = spans[1:]
		}
		if len(spans) > 0 && spans[0].from <= at {
			end := spans[0].to
			for len(spans) > 0 && spans[0].from <= end { // overlapping or touching: one replacement
				end = max(end, spans[0].to)
				spans = spans[1:]
			}
			out.WriteString(redacted)
			at = end
			continue
		}
		next := len(raw)
		if len(spans) > 0 {
			next = spans[0].from
		}
		next = min(next, limit, at+limit-out.Len())
		out.Write(raw[at:next])
		at = next
	}
	return strings.ToValidUTF8(out.String(), string(utf8.RuneError)), cut
}

// has reports whether s holds a secret value the job knows, or a URL's
// userinfo.
func (r *redactor) has(s string) bool {
	return slices.ContainsFunc(r.secrets, func(b []byte) bool { return strings.Contains(s, string(b)) }) ||
		secretPatterns[0].re.MatchString(s)
}

// args is argv for a log line, redacted.
func (r *redactor) args(argv []string) []string {
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i], _ = r.redact([]byte(a), len(a)+1)
	}
	return out
}
