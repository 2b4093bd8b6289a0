package certsync_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/jobs/certsync"
	"github.com/snip/snip-jobs/scheduler"
	"github.com/snip/snip-jobs/testbench/jobtest"
)

func registry(t *testing.T) *scheduler.Registry {
	t.Helper()
	reg, err := scheduler.NewRegistry(certsync.Type())
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

func TestBadOptionsAreReportedAtValidateTimeWithTheirFileAndLine(t *testing.T) {
	t.Parallel()
	_, err := configs.Parse("snip-jobs.yaml", []byte(`instance: server-1
jobs:
  - name: cert-files
    type: certsync
    singleton: false
    continuous: true
    options:
      dir: certs
      key_file: /etc/snip-jobs/certificate-keys
      key_env: SNIP_CERT_KEYS
      group: "www data"
      reload: [systemctl, reload, haproxy]
      reload_timeout: 0s
      settle: -1s
`), registry(t))
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{
		`dir "certs" must be an absolute, clean path`,
		"set key_file or key_env, not both",
		`group "www data"`,
		`reload: the program "systemctl" must be an absolute path`,
		"reload_timeout must be positive",
		"settle must be from 0",
	} {
		found := false
		for _, line := range strings.Split(err.Error(), "\n") {
			if strings.Contains(line, want) {
				found = true
				if !strings.HasPrefix(line, `snip-jobs.yaml:8:7: job "cert-files": options: `) {
					t.Errorf("%q is reported as %q, want it at the options, naming the job", want, line)
				}
			}
		}
		if !found {
			t.Errorf("no problem reported containing %q in:\n%v", want, err)
		}
	}
}

func TestACertsyncJobMustRunOnEveryServerContinuously(t *testing.T) {
	t.Parallel()
	opts := certsync.DefaultOptions()
	opts.Dir, opts.KeyFile = "/var/lib/snip-certs", "/etc/snip-jobs/certificate-keys"
	for _, c := range []struct {
		spec configs.Job
		want string
	}{
		{configs.Job{Name: "cert-files", Singleton: true, Schedule: configs.Schedule{Kind: configs.Continuous}},
			`certsync "cert-files": must not be a singleton (set singleton: false): every server keeps its own directory`},
		{configs.Job{Name: "cert-files", Schedule: configs.Schedule{Kind: configs.Interval, Every: time.Minute}},
			`certsync "cert-files": needs continuous: true`},
	} {
		c.spec.Type, c.spec.Options = "certsync", jobtest.Options(t, opts)
		_, err := certsync.Type().Build(scheduler.Env{}, c.spec)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.spec, err, c.want)
		}
	}
}

// The example config documents every option of the type, in an entry that
// validates.
func TestTheExampleConfigDocumentsEveryOption(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "..", "configs", "snip-jobs.example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	_, entry, ok := strings.Cut(string(b), "\n  - name: cert-files\n")
	if !ok {
		t.Fatal("configs/snip-jobs.example.yaml has no job named cert-files")
	}
	if i := strings.Index(entry, "\n  - name:"); i >= 0 {
		entry = entry[:i]
	}
	entry = "  - name: cert-files\n" + entry
	f, err := configs.Parse("example.yaml", []byte("jobs:\n"+entry+"\n"), registry(t))
	if err != nil {
		t.Fatalf("the example's certsync entry does not validate:\n%v\n%s", err, entry)
	}
	if f.Jobs[0].Type != "certsync" || f.Jobs[0].Singleton || f.Jobs[0].Schedule.Kind != configs.Continuous {
		t.Errorf("the example's entry is %+v, want a certsync job, not a singleton, continuous", f.Jobs[0])
	}
	for field := range reflect.TypeFor[certsync.Options]().Fields() {
		key, _, _ := strings.Cut(field.Tag.Get("yaml"), ",")
		if !strings.Contains(entry, " "+key+":") {
			t.Errorf("the example's certsync entry does not show option %s", key)
		}
	}
}
