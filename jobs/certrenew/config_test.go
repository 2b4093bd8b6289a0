package certrenew_test

import (
	"strings"
	"testing"
	"time"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/jobs/certrenew"
	"github.com/snip/snip-jobs/scheduler"
)

// The options as an operator writes them, through the real config loader.
func TestOptionsFromTheConfigFile(t *testing.T) {
	t.Parallel()
	reg, err := scheduler.NewRegistry(certrenew.Type())
	if err != nil {
		t.Fatal(err)
	}
	f, err := configs.Parse("snip-jobs.yaml", []byte(`
jobs:
  - name: cert-renewer
    type: certrenew
    every: 1h
    jitter: 5m
    options:
      email: ops@snip.example
      key_env: SNIP_CERTRENEW_KEY
      lock_delay: 90s
      concurrency: 8
      renew_fraction: 0.75
      statuses: [active, verified]
`), reg)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	o, err := configs.DecodeOptions(f.Jobs[0], certrenew.DefaultOptions)
	if err != nil {
		t.Fatal(err)
	}
	if o.Email != "ops@snip.example" || o.KeyEnv != "SNIP_CERTRENEW_KEY" || o.LockDelay != 90*time.Second ||
		o.Concurrency != 8 || o.RenewFraction != 0.75 || strings.Join(o.Statuses, ",") != "active,verified" {
		t.Errorf("decoded: %+v", o)
	}
	if o.Directory != certrenew.LetsEncrypt || o.OrderBudget != 300 || o.ShortRenewFraction != 0.5 || o.ChallengeListen != ":80" {
		t.Errorf("defaults lost: %+v", o)
	}

	_, err = configs.Parse("snip-jobs.yaml", []byte(`
jobs:
  - name: cert-renewer
    type: certrenew
    every: 1h
    options:
      directory: http://insecure.example/dir
      concurrency: 0
`), reg)
	if err == nil {
		t.Fatal("bad options accepted")
	}
	for _, want := range []string{"snip-jobs.yaml:", "directory must be an https URL", "concurrency", "key_file or key_env is required"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q:\n%v", want, err)
		}
	}

	// Strict: a key the type does not know is an error, not ignored.
	_, err = configs.Parse("snip-jobs.yaml", []byte(`
jobs:
  - name: cert-renewer
    type: certrenew
    every: 1h
    options:
      key_file: /etc/snip/certrenew.key
      domains: [a.example]
`), reg)
	if err == nil || !strings.Contains(err.Error(), `unknown key "domains"`) {
		t.Errorf("unknown option: %v", err)
	}
}

// An entry without a schedule renews hourly, jittered (issue: "default
// hourly, jittered").
func TestTheRenewerRunsHourlyByDefault(t *testing.T) {
	t.Parallel()
	reg, err := scheduler.NewRegistry(certrenew.Type())
	if err != nil {
		t.Fatal(err)
	}
	f, err := configs.Parse("snip-jobs.yaml", []byte(`
jobs:
  - name: cert-renewer
    type: certrenew
    options: {email: ops@snip.example, key_env: SNIP_CERTRENEW_KEY}
`), reg)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	if s := f.Jobs[0].Schedule; s.Kind != configs.Interval || s.Every != time.Hour || s.Jitter != 5*time.Minute {
		t.Errorf("schedule %v every %v jitter %v; want every 1h, jitter 5m", s.Kind, s.Every, s.Jitter)
	}
}
