package certsync

import (
	"strings"
	"testing"
)

func TestKnownSecretsAreTheDatabasePasswordTheKeysAndSecretLookingVariables(t *testing.T) {
	t.Setenv("SNIP_TEST_KEYS_VAR", "# rotated\nAAAAkey1\nBBBBkey2\n")
	t.Setenv("SNIP_ETCD_PASSWORD", "etcd-pass-long")
	t.Setenv("SNIP_TEST_SHORT_TOKEN", "1") // too short to be taken on its name alone
	t.Setenv("SNIP_TEST_URL", "postgres://u:urlpass@db/x")
	got := knownSecrets("db pass", Options{KeyEnv: "SNIP_TEST_KEYS_VAR"})
	for _, want := range []string{"db pass", "db%20pass", "db+pass", "AAAAkey1", "BBBBkey2", "etcd-pass-long", "urlpass"} {
		if !strings.Contains("\x00"+strings.Join(got, "\x00")+"\x00", "\x00"+want+"\x00") {
			t.Errorf("knownSecrets lacks %q: %q", want, got)
		}
	}
	for _, s := range got {
		if s == "1" || s == "# rotated" {
			t.Errorf("knownSecrets holds %q", s)
		}
	}
}
