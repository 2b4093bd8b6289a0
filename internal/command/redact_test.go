package command

import (
	"strings"
	"testing"
)

func TestRedactReplacesKnownSecretsAndWhatLooksLikeOne(t *testing.T) {
	r := NewRedactor([]string{"hunter2-long", "k3y"})
	for _, c := range []struct{ in, want string }{
		{"postgres://snip_jobs:p@ss@db:5432/snip?sslmode=require", "postgres://[REDACTED]@db:5432/snip?sslmode=require"},
		{"+ PGPASSWORD=abc /usr/bin/psql", "+ PGPASSWORD=[REDACTED] /usr/bin/psql"},
		{"host=db password='a b' user=x", "host=db password=[REDACTED] user=x"},
		{"SNIP_CERT_KEYS=c2VjcmV0\nPATH=/usr/bin", "SNIP_CERT_KEYS=[REDACTED]\nPATH=/usr/bin"},
		{"said hunter2-long twice: hunter2-long.", "said [REDACTED] twice: [REDACTED]."},
		{"-----BEGIN EC PRIVATE KEY-----\nMHcC\n-----END EC PRIVATE KEY-----\nok", "[REDACTED]\nok"},
		{"-----BEGIN PRIVATE KEY-----\nMHcC (cut here)", "[REDACTED]"},
		{"nginx: configuration file /etc/nginx/nginx.conf test failed", "nginx: configuration file /etc/nginx/nginx.conf test failed"},
	} {
		if got, cut := r.Redact([]byte(c.in), 1000); got != c.want || cut {
			t.Errorf("redact(%q) = %q, %v; want %q", c.in, got, cut, c.want)
		}
	}
}

func TestRedactCutsNeverInsideASecretAndBoundsItsOutput(t *testing.T) {
	r := NewRedactor([]string{"0123456789abcdef"})
	raw := strings.Repeat(".", 95) + "0123456789abcdef" + strings.Repeat(".", 100)
	got, cut := r.Redact([]byte(raw), 100)
	if want := strings.Repeat(".", 95) + "[REDACTED]"; got != want || !cut {
		t.Errorf("a secret across the cut: %q, %v; want %q, cut", got, cut, want)
	}
	if r.Capture(100) < 100+len("0123456789abcdef") {
		t.Errorf("capture(100) = %d keeps too little to see a secret starting before the cut whole", r.Capture(100))
	}
	short := NewRedactor([]string{"x"})
	got, cut = short.Redact([]byte(strings.Repeat("x.", 500)), 100) // a replacement per x: the output grows
	if len(got) > 100+len("[REDACTED]") || !cut || strings.Contains(got, "x") {
		t.Errorf("a short secret repeated: %d bytes, cut %v: %q", len(got), cut, got)
	}
}

func TestTheSecretsOfTheDatabaseAndTheEnvironmentAreItsPasswordsAndSecretLookingVariables(t *testing.T) {
	got := append(DatabaseSecrets("db pass"), EnvironmentSecrets([]string{
		"SNIP_TEST_KEYS_VAR=AAAAkey1", // named by the job: taken whatever its name
		"SNIP_ETCD_PASSWORD=etcd-pass-long",
		"SNIP_TEST_SHORT_TOKEN=1", // too short to be taken on its name alone
		"SNIP_TEST_URL=postgres://u:urlpass@db/x",
		"LANG=C.UTF-8",
	}, "SNIP_TEST_KEYS_VAR")...)
	for _, want := range []string{"db pass", "db%20pass", "db+pass", "AAAAkey1", "etcd-pass-long", "urlpass"} {
		if !strings.Contains("\x00"+strings.Join(got, "\x00")+"\x00", "\x00"+want+"\x00") {
			t.Errorf("the secrets lack %q: %q", want, got)
		}
	}
	for _, s := range got {
		if s == "1" || s == "C.UTF-8" {
			t.Errorf("the secrets hold %q", s)
		}
	}
}
