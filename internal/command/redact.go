package command

import (
	"bytes"
	"cmp"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// redacted replaces what the redactor withholds.
const redacted = "[REDACTED]"

// Redactor withholds secrets from text the service logs without having
// written it: a program's output, and its arguments. It replaces every
// secret value it was given (DatabaseSecrets, EnvironmentSecrets, a job's
// own) and whatever looks like one (secretPatterns).
type Redactor struct {
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

// DatabaseSecrets are the forms the database password (as pgx parsed it
// from the URL) may take in a program's output: as is, path- and
// query-escaped.
func DatabaseSecrets(password string) []string {
	if password == "" {
		return nil
	}
	return []string{password, url.PathEscape(password), url.QueryEscape(password)}
}

// EnvironmentSecrets are the secret values the service's environment
// (environ, as os.Environ) holds: the values of the variables whose name says
// they hold one (an etcd password, a token: a job is not told which
// variables the config reads them from) or that are listed in also (a
// job's key_env), at least minGuessed long when only the name says so; and
// the password of any URL among them.
func EnvironmentSecrets(environ []string, also ...string) []string {
	var out []string
	add := func(s string, minLen int) {
		if s = strings.TrimSpace(s); len(s) >= minLen {
			out = append(out, s)
		}
	}
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		switch {
		case slices.Contains(also, name):
			add(value, 1)
		case secretName.MatchString(name):
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

// NewRedactor withholds secrets (empty and repeated ones are dropped).
func NewRedactor(secrets []string) *Redactor {
	r := &Redactor{}
	for _, s := range secrets {
		if s != "" && !slices.ContainsFunc(r.secrets, func(b []byte) bool { return string(b) == s }) {
			r.secrets = append(r.secrets, []byte(s))
			r.longest = max(r.longest, len(s))
		}
	}
	slices.SortFunc(r.secrets, func(a, b []byte) int { return cmp.Compare(len(b), len(a)) })
	return r
}

// Capture is how much of a program's output must be kept for Redact to
// show limit bytes of it: a secret that starts within limit is then whole.
func (r *Redactor) Capture(limit int) int { return limit + max(r.longest, 4<<10) }

// Redact returns raw with every secret replaced, cut after limit bytes of
// raw (and at most limit bytes of output), and whether it was cut. Spans
// are found in raw as a whole before anything is cut, so a cut never
// leaves part of a secret: a secret that starts before the cut is
// replaced whole.
func (r *Redactor) Redact(raw []byte, limit int) (string, bool) {
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

// Has reports whether s holds a secret value the redactor knows, or a URL's
// userinfo.
func (r *Redactor) Has(s string) bool {
	return slices.ContainsFunc(r.secrets, func(b []byte) bool { return strings.Contains(s, string(b)) }) ||
		secretPatterns[0].re.MatchString(s)
}

// Args is argv for a log line, redacted.
func (r *Redactor) Args(argv []string) []string {
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i], _ = r.Redact([]byte(a), len(a)+1)
	}
	return out
}
