package configs_test

import (
	"strings"
	"testing"

	"github.com/snip/snip-jobs/configs"
)

// anyOptions knows the example's job types and takes whatever options they
// have: the real types check them (cmd's TestValidateAcceptsTheExampleConfig).
type anyOptions struct{ fakeTypes }

func (anyOptions) Options(jobType string) (configs.OptionsType, bool) {
	if _, ok := (fakeTypes{}).Options(jobType); !ok && jobType != "certsync" {
		return nil, false
	}
	return configs.OptionsOf(func() map[string]any { return map[string]any{} }), true
}

func TestTheExampleFileParsesCleanly(t *testing.T) {
	f, err := configs.Load("snip-jobs.example.yaml", anyOptions{})
	if err != nil {
		t.Fatalf("the example file must parse cleanly:\n%v", err)
	}
	var names []string
	for _, j := range f.Jobs {
		names = append(names, j.Name)
	}
	if strings.Join(names, " ") != "cert-renewer cert-files aggregator weekly-report" {
		t.Errorf("jobs: got %v, want cert-renewer, cert-files, aggregator, weekly-report", names)
	}
	report := f.Jobs[3].Schedule
	if report.Kind != configs.Cron || report.Location.String() != "Europe/Paris" {
		t.Errorf("weekly-report: got %v in %v, want cron in Europe/Paris", report.Kind, report.Location)
	}
}
