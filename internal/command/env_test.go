package command

import (
	"os"
	"slices"
	"testing"
)

// A program's environment is PATH, the language and time zone, and its own
// variables: nothing else of the service's, and none of those if it holds a
// secret (PATH then falls back to DefaultPath).
func TestAProgramsEnvironmentIsAShortListNeverTheServices(t *testing.T) {
	t.Setenv("PATH", "/opt/bin:/usr/bin")
	t.Setenv("LANG", "C.UTF-8")
	t.Setenv("LC_ALL", "") // restored after the test, unset during it
	os.Unsetenv("LC_ALL")
	t.Setenv("TZ", "postgres://u:pw@db/x") // a secret where a time zone should be
	t.Setenv("SNIP_JOBS_DATABASE_URL", "postgres://u:pw@db/x")
	t.Setenv("SNIP_KEYS", "AAAA")
	r := NewRedactor(EnvironmentSecrets([]string{"SNIP_KEYS=AAAA"}, "SNIP_KEYS"))
	got := Env(r, []string{"SNIP_KEYS"}, "SNIP_JOBS_JOB=backup")
	want := []string{"PATH=/opt/bin:/usr/bin", "LANG=C.UTF-8", "SNIP_JOBS_JOB=backup"}
	if !slices.Equal(got, want) {
		t.Errorf("Env = %q, want %q", got, want)
	}
	t.Setenv("PATH", "/bin:AAAA")
	if got := Env(r, nil); got[0] != "PATH="+DefaultPath {
		t.Errorf("a PATH holding a secret: %q, want the default", got[0])
	}
}
