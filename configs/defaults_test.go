package configs_test

import (
	"strings"
	"testing"
	"time"

	"github.com/snip/snip-jobs/configs"
)

// typesWithDefaults is fakeTypes whose weeklyreport and certrenew types give
// their entries a schedule, as the real ones do.
type typesWithDefaults struct{ fakeTypes }

func (typesWithDefaults) Defaults(jobType string) configs.Defaults {
	switch jobType {
	case "weeklyreport":
		return configs.Defaults{Cron: "0 8 * * MON", CatchUp: configs.All, CatchUpWindow: 336 * time.Hour}
	case "certrenew":
		return configs.Defaults{Every: time.Hour, Jitter: 5 * time.Minute}
	}
	return configs.Defaults{}
}

const certOpts = "    options: {email: ops@example.com, domains: [a.example]}"

// An entry that leaves its schedule out gets its type's; what it writes
// itself wins, key by key.
func TestAJobTypesDefaultsFillWhatItsEntryLeavesOut(t *testing.T) {
	f, err := configs.Parse("test.yaml", lines(
		"jobs:",
		"  - name: report",
		"    type: weeklyreport",
		"    timezone: Europe/Paris",
		"  - name: report-at-nine",
		"    type: weeklyreport",
		`    cron: "0 9 * * MON"`,
		"    catch_up: latest",
		"  - name: certs",
		"    type: certrenew",
		certOpts,
		"  - name: certs-every-2h",
		"    type: certrenew",
		"    every: 2h",
		certOpts,
	), typesWithDefaults{})
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	report, nine, certs, certs2h := f.Jobs[0].Schedule, f.Jobs[1].Schedule, f.Jobs[2].Schedule, f.Jobs[3].Schedule
	if report.Kind != configs.Cron || report.Cron != "0 8 * * MON" || report.Location.String() != "Europe/Paris" ||
		report.CatchUp != configs.All || report.CatchUpWindow != 336*time.Hour {
		t.Errorf("report: %v %q in %v, catch_up %v within %v; want cron \"0 8 * * MON\" in Europe/Paris, all within 336h",
			report.Kind, report.Cron, report.Location, report.CatchUp, report.CatchUpWindow)
	}
	if paris := report.Location; report.Spec == nil || !report.Spec.Next(time.Date(2026, 11, 30, 0, 0, 0, 0, paris)).Equal(time.Date(2026, 11, 30, 8, 0, 0, 0, paris)) {
		t.Errorf("report: the default spec does not fire on Monday 08:00 Paris time")
	}
	if nine.Cron != "0 9 * * MON" || nine.CatchUp != configs.Latest || nine.CatchUpWindow != 336*time.Hour {
		t.Errorf("report-at-nine: %q, catch_up %v within %v; want its own spec and policy, the type's window", nine.Cron, nine.CatchUp, nine.CatchUpWindow)
	}
	if certs.Kind != configs.Interval || certs.Every != time.Hour || certs.Jitter != 5*time.Minute {
		t.Errorf("certs: %v every %v jitter %v; want the type's 1h with 5m jitter", certs.Kind, certs.Every, certs.Jitter)
	}
	if certs2h.Every != 2*time.Hour || certs2h.Jitter != 0 {
		t.Errorf("certs-every-2h: every %v jitter %v; want its own 2h and no jitter (the type's belongs to its own interval)", certs2h.Every, certs2h.Jitter)
	}
}

// A type without defaults still needs a schedule, and a default schedule's
// kind decides which keys apply, as a written one does.
func TestDefaultSchedulesDoNotLoosenTheChecks(t *testing.T) {
	_, err := configs.Parse("test.yaml", lines(
		"jobs:",
		"  - name: counts",
		"    type: aggregator",
		"  - name: certs",
		"    type: certrenew",
		"    timezone: Europe/Paris",
		certOpts,
	), typesWithDefaults{})
	if err == nil {
		t.Fatal("Parse accepted a job without a schedule and a cron key on an interval job")
	}
	for _, want := range []string{
		`test.yaml:2:5: job "counts": job has no schedule`,
		`test.yaml:6:5: job "certs": timezone applies only to cron: schedules, not every`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("problems:\n%v\nwant one starting %q", err, want)
		}
	}
}
