package certrenew_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/snip/snip-jobs/jobs/certrenew"
	"github.com/snip/snip-jobs/jobs/certrenew/acmeflow"
	"github.com/snip/snip-jobs/jobs/certrenew/domainstore"
	"github.com/snip/snip-jobs/jobs/certrenew/keyring"
)

func TestKeyringOpensWhatItSealedAndNothingElse(t *testing.T) {
	t.Parallel()
	k1, k2 := newKey(t), newKey(t)
	ring := mustRing(t, k1)
	blob := ring.Seal([]byte("private key"), "shop.example.com")

	if pt, err := ring.Open(blob, "shop.example.com"); err != nil || string(pt) != "private key" {
		t.Fatalf("Open = %q, %v", pt, err)
	}
	if _, err := ring.Open(blob, "other.example.com"); !errors.Is(err, keyring.ErrSealed) {
		t.Errorf("opened for another row: %v, want ErrSealed", err)
	}
	if _, err := mustRing(t, k2).Open(blob, "shop.example.com"); !errors.Is(err, keyring.ErrUnknownKey) {
		t.Errorf("opened with another key: %v, want ErrUnknownKey", err)
	}
	tampered := bytes.Clone(blob)
	tampered[len(tampered)-1] ^= 1
	if _, err := ring.Open(tampered, "shop.example.com"); !errors.Is(err, keyring.ErrSealed) {
		t.Errorf("tampered blob: %v, want ErrSealed", err)
	}
	if bytes.Equal(blob, ring.Seal([]byte("private key"), "shop.example.com")) {
		t.Errorf("two seals of the same text are equal: the nonce is not fresh")
	}

	// Rotation: new key first seals, the old one still opens.
	rotated := mustRing(t, k2, k1)
	if _, err := rotated.Open(blob, "shop.example.com"); err != nil {
		t.Errorf("the rotated ring does not open what the old key sealed: %v", err)
	}
	if rotated.KeyID() == ring.KeyID() || rotated.KeyIDs()[1] != ring.KeyID() {
		t.Errorf("key ids %v after rotation of %v", rotated.KeyIDs(), ring.KeyIDs())
	}
}

func TestKeyringNeverShowsItsKeys(t *testing.T) {
	t.Parallel()
	key := newKey(t)
	ring := mustRing(t, key)
	var logs bytes.Buffer
	slog.New(slog.NewTextHandler(&logs, nil)).Info("ring", "keys", ring)
	for _, s := range []string{fmt.Sprint(ring), fmt.Sprintf("%+v", ring), fmt.Sprintf("%#v", ring), logs.String()} {
		if strings.Contains(s, key) || !strings.Contains(s, ring.KeyID()) {
			t.Errorf("printed as %q: want the key id and not the key", s)
		}
	}
}

func TestBadKeyMaterialIsRefusedWithoutShowingIt(t *testing.T) {
	short := "c2hvcnQ=" // "short"
	for name, content := range map[string]string{
		"empty":      "# only a comment\n\n",
		"not base64": "not base64 at all!\n",
		"short":      short + "\n",
		"repeated":   "K\nK\n",
	} {
		if name == "repeated" {
			k := newKey(t)
			content = k + "\n" + k + "\n"
		}
		_, err := keyring.Parse([]byte(content))
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if strings.Contains(err.Error(), short) || strings.Contains(err.Error(), "not base64 at all") {
			t.Errorf("%s: the error shows the key material: %v", name, err)
		}
	}

	t.Setenv("CERTRENEW_TEST_KEY", newKey(t))
	o := certrenew.Options{KeyEnv: "CERTRENEW_TEST_KEY"}
	if _, err := o.Keyring(); err != nil {
		t.Errorf("key_env: %v", err)
	}
	os.Unsetenv("CERTRENEW_TEST_KEY")
	if _, err := o.Keyring(); err == nil || !strings.Contains(err.Error(), "CERTRENEW_TEST_KEY") {
		t.Errorf("unset key_env: %v, want an error naming the variable", err)
	}
	o = certrenew.Options{KeyFile: "/nonexistent/certrenew.key"}
	if _, err := o.Keyring(); err == nil || !strings.Contains(err.Error(), "/nonexistent/certrenew.key") {
		t.Errorf("missing key_file: %v, want an error naming the file", err)
	}
}

func mustRing(t *testing.T, keys ...string) *keyring.Keyring {
	t.Helper()
	k, err := keyring.Parse([]byte(strings.Join(keys, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestOptionsDefaultsAndValidation(t *testing.T) {
	t.Parallel()
	o := certrenew.DefaultOptions()
	o.KeyFile = "/etc/snip/certrenew.key"
	if err := o.Validate(); err != nil {
		t.Fatalf("defaults plus a key file: %v", err)
	}
	if o.Directory != certrenew.LetsEncrypt || o.ChallengeListen != ":80" || o.LockDelay != time.Minute ||
		o.Concurrency != 4 || o.OrderBudget != 300 || o.RenewFraction != 2.0/3.0 || o.ShortRenewFraction != 0.5 {
		t.Errorf("defaults: %+v", o)
	}

	bad := certrenew.Options{
		Directory: "http://acme.example/dir", Email: "not an address", Profile: "two words",
		ChallengeListen: "80", KeyFile: "/k", KeyEnv: "K", LockDelay: -time.Second,
		Concurrency: 0, OrderBudget: 0, RenewFraction: 1.5, ShortRenewFraction: 0,
		ShortLifetime: -time.Hour, Statuses: nil, OrderTimeout: 0, UnavailablePause: 0,
	}
	err := bad.Validate()
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"directory", "email", "profile", "challenge_listen", "not both", "lock_delay",
		"concurrency", "order_budget", "renew_fraction", "short_renew_fraction", "short_lifetime", "statuses",
		"order_timeout", "unavailable_pause"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("validation does not mention %s:\n%v", want, err)
		}
	}
	none := certrenew.DefaultOptions()
	if err := none.Validate(); err == nil || !strings.Contains(err.Error(), "key_file or key_env is required") {
		t.Errorf("no key: %v", err)
	}
}

func TestBackoffAndFallbackRenewal(t *testing.T) {
	t.Parallel()
	for failures, want := range map[int]time.Duration{0: 0, 1: time.Minute, 2: 10 * time.Minute, 3: 100 * time.Minute, 4: 24 * time.Hour, 9: 24 * time.Hour} {
		if got := acmeflow.Backoff(failures); got != want {
			t.Errorf("Backoff(%d) = %v, want %v", failures, got, want)
		}
	}
	nb := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	o := certrenew.DefaultOptions()
	for _, tc := range []struct {
		life, want time.Duration
	}{
		{90 * 24 * time.Hour, 60 * 24 * time.Hour}, // 2/3
		{11 * 24 * time.Hour, 176 * time.Hour},     // 2/3 of 264 h
		{10 * 24 * time.Hour, 5 * 24 * time.Hour},  // ≤ 10 days: 1/2
		{6 * 24 * time.Hour, 3 * 24 * time.Hour},   // Let's Encrypt's short-lived: 1/2
	} {
		got := domainstore.FallbackRenewAt(nb, nb.Add(tc.life), o.RenewFraction, o.ShortRenewFraction, o.ShortLifetime)
		if d := got.Sub(nb); d < tc.want-time.Second || d > tc.want+time.Second {
			t.Errorf("lifetime %v: renew after %v, want %v", tc.life, d, tc.want)
		}
	}
}
