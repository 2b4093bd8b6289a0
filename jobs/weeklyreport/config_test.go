package weeklyreport_test

import (
	"testing"
	"time"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/jobs/weeklyreport"
	"github.com/snip/snip-jobs/scheduler"
)

// An entry without a schedule reports on Mondays at 08:00 in its time zone,
// and catches up every Monday missed within two weeks.
func TestTheReportRunsOnMondayAtEightByDefault(t *testing.T) {
	t.Parallel()
	reg, err := scheduler.NewRegistry(weeklyreport.Type())
	if err != nil {
		t.Fatal(err)
	}
	f, err := configs.Parse("snip-jobs.yaml", []byte(`
jobs:
  - name: weekly-report
    type: weeklyreport
    timezone: America/New_York
`), reg)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	s := f.Jobs[0].Schedule
	if s.Kind != configs.Cron || s.CatchUp != configs.All || s.CatchUpWindow != 14*24*time.Hour {
		t.Fatalf("schedule %v, catch_up %v within %v; want cron, all, 336h", s.Kind, s.CatchUp, s.CatchUpWindow)
	}
	ny := s.Location
	// Sunday 1 March 2026 noon → Monday 2 March 08:00 New York time.
	if next := s.Spec.Next(time.Date(2026, 3, 1, 12, 0, 0, 0, ny)); !next.Equal(time.Date(2026, 3, 2, 8, 0, 0, 0, ny)) {
		t.Errorf("next run %v, want Monday 2 March 2026 08:00 in New York", next)
	}
}
