package weeklyreport_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/jobs/weeklyreport"
	"github.com/snip/snip-jobs/scheduler"
	"github.com/snip/snip-jobs/testbench/jobtest"
)

// seedNormalWeek fills 2026-W47 (Monday 16 to Sunday 22 November 2026, all
// CET, UTC+1) and the week before in Europe/Paris, with clicks in the first and
// last hours of both weeks and in the hours just outside them.
func seedNormalWeek(d *db, paris *time.Location) {
	d.links(map[int64]string{1: "alpha", 2: "beta", 3: "gamma", 4: "delta", 6: "epsilon"})
	// link 5 has counts but is no longer in links (deleted by Snip).

	// 2026-W46, the week before: alpha 10, gamma 40, delta 5, epsilon 20.
	d.clicks(4, at(paris, "2026-11-09 00:00"), 5)  // its first hour
	d.clicks(3, at(paris, "2026-11-10 14:00"), 40) //
	d.clicks(6, at(paris, "2026-11-12 09:00"), 20) //
	d.clicks(1, at(paris, "2026-11-15 23:00"), 10) // its last hour

	// 2026-W47.
	d.clicks(1, at(paris, "2026-11-16 00:00"), 10) // Monday, first hour of the week
	d.clicks(2, at(paris, "2026-11-17 09:00"), 5)  // Tuesday
	d.clicks(1, at(paris, "2026-11-18 12:00"), 20) // Wednesday
	d.clicks(3, at(paris, "2026-11-18 18:00"), 30) // Wednesday
	d.clicks(4, at(paris, "2026-11-19 10:00"), 8)  // Thursday
	d.clicks(6, at(paris, "2026-11-20 23:00"), 25) // Friday 23:00 local is 22:00 UTC: still Friday
	d.clicks(5, at(paris, "2026-11-21 00:00"), 2)  // Saturday 00:00 local is Friday 23:00 UTC
	d.clicks(2, at(paris, "2026-11-22 23:00"), 7)  // Sunday, last hour of the week

	// Outside both weeks: the hour before 2026-W46 and the hour after 2026-W47.
	d.clicks(3, at(paris, "2026-11-08 23:00"), 1000)
	d.clicks(2, at(paris, "2026-11-23 00:00"), 1000)
}

func TestReportOfANormalWeek(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	paris := mustLoad(t, "Europe/Paris")
	seedNormalWeek(d, paris)
	j := newJob(t, "Europe/Paris", &weeklyreport.Options{Top: 3, Growth: 3, GrowthMinPrevious: 10})

	slot := at(paris, "2026-11-23 08:00")
	d.mustRunSlot(j, slot, 100, "server-1")

	r := d.show("2026-W47")
	if r.Week != "2026-W47" || r.PreviousWeek != "2026-W46" || r.TimeZone != "Europe/Paris" {
		t.Errorf("week %s, previous %s, zone %s; want 2026-W47, 2026-W46, Europe/Paris", r.Week, r.PreviousWeek, r.TimeZone)
	}
	if want := at(paris, "2026-11-16 00:00"); !r.Start.Equal(want) {
		t.Errorf("start %v, want %v", r.Start, want)
	}
	if want := at(paris, "2026-11-23 00:00"); !r.End.Equal(want) {
		t.Errorf("end %v, want %v", r.End, want)
	}
	if r.Total != 107 || r.PreviousTotal != 75 || r.LinksClicked != 6 {
		t.Errorf("total %d, previous %d, links clicked %d; want 107, 75, 6", r.Total, r.PreviousTotal, r.LinksClicked)
	}
	wantDays := []string{
		"Mon 2026-11-16 24h 10",
		"Tue 2026-11-17 24h 5",
		"Wed 2026-11-18 24h 50",
		"Thu 2026-11-19 24h 8",
		"Fri 2026-11-20 24h 25",
		"Sat 2026-11-21 24h 2",
		"Sun 2026-11-22 24h 7",
	}
	if got := days(r); !slices.Equal(got, wantDays) {
		t.Errorf("days\n%q\nwant\n%q", got, wantDays)
	}
	// Ties (alpha and gamma, 30 each) go to the lower link id.
	if got, want := top(r), []string{"1 alpha 30", "3 gamma 30", "6 epsilon 25"}; !slices.Equal(got, want) {
		t.Errorf("top %q, want %q", got, want)
	}
	// By absolute increase; a link with no clicks the week before is "new"
	// (its relative growth is null) and ranks by its increase like any other.
	if got, want := growth(r.GrewMost), []string{
		"1 alpha 10->30 +20 +200%",
		"2 beta 0->12 +12 new",
		"6 epsilon 20->25 +5 +25%",
	}; !slices.Equal(got, want) {
		t.Errorf("grew most %q, want %q", got, want)
	}
	// By relative increase, among links with at least 10 clicks the week
	// before: delta (5 -> 8) and the new links are not ranked; gamma fell.
	if got, want := growth(r.GrewFastest), []string{
		"1 alpha 10->30 +20 +200%",
		"6 epsilon 20->25 +5 +25%",
	}; !slices.Equal(got, want) {
		t.Errorf("grew fastest %q, want %q", got, want)
	}

	row := d.stored("2026-W47")
	if row.Job != jobName || row.Token != 100 || row.Instance != "server-1" || row.TimeZone != "Europe/Paris" {
		t.Errorf("stored by job %q token %d instance %q zone %q; want %q 100 server-1 Europe/Paris",
			row.Job, row.Token, row.Instance, row.TimeZone, jobName)
	}
	if !row.Start.Equal(r.Start) || !row.End.Equal(r.End) {
		t.Errorf("stored week %v to %v, want %v to %v", row.Start, row.End, r.Start, r.End)
	}
	if row.ReplacedAt != "" || row.Replacements != 0 {
		t.Errorf("a new report is marked replaced: %v, %d", row.ReplacedAt, row.Replacements)
	}
	if row.Text != r.Text() || row.CSV != r.CSV() {
		t.Errorf("stored text or CSV differ from the stored body's rendering")
	}
	if got, want := d.outbox(), []outboxRow{{
		ID: 1, Week: "2026-W47", Subject: "Snip weekly report 2026-W47 (Mon 16 Nov to Sun 22 Nov 2026): 107 clicks",
	}}; !slices.Equal(got, want) {
		t.Errorf("outbox %+v, want %+v", got, want)
	}
	if got := d.slotState(jobName, slot); got != "done by 100" {
		t.Errorf("slot: %s, want done by 100", got)
	}
}

func TestTheSlotDecidesTheWeek(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	paris := mustLoad(t, "Europe/Paris")
	j := newJob(t, "Europe/Paris", nil)
	for _, c := range []struct {
		slot time.Time
		week string
		why  string
	}{
		{at(paris, "2026-11-23 08:00"), "2026-W47", "Monday 08:00: the week that ended 8 hours earlier"},
		{at(paris, "2026-11-23 00:00"), "2026-W47", "Monday 00:00 exactly: the week that has just ended"},
		{at(paris, "2026-11-22 23:00"), "2026-W46", "Sunday 23:00: 2026-W47 has not ended yet"},
		{at(paris, "2026-11-25 08:00"), "2026-W47", "a Wednesday slot: still 2026-W47, already stored"},
		{at(paris, "2027-01-04 08:00"), "2026-W53", "2026 has 53 ISO weeks; the last ends on 3 January 2027"},
		{at(paris, "2027-01-11 08:00"), "2027-W01", "ISO week 1 of 2027 starts on Monday 4 January"},
		// Still Sunday in UTC, already Monday in Paris: the job's zone decides.
		{time.Date(2026, 11, 22, 23, 30, 0, 0, time.UTC), "2026-W47", "Sunday 23:30 UTC is Monday 00:30 in Paris"},
	} {
		if err := d.runSlot(j, jobName, c.slot, 100, "server-1"); err != nil {
			t.Fatalf("slot %v (%s): %v", c.slot, c.why, err)
		}
		if !slices.Contains(d.weeks(), c.week) {
			t.Errorf("slot %v (%s): weeks stored %v, want %s among them", c.slot, c.why, d.weeks(), c.week)
		}
	}
	if got, want := d.weeks(), []string{"2026-W46", "2026-W47", "2026-W53", "2027-W01"}; !slices.Equal(got, want) {
		t.Errorf("weeks stored %v, want %v (one row each)", got, want)
	}
	if n := len(d.outbox()); n != 4 {
		t.Errorf("%d outbox rows, want 4 (one per week)", n)
	}
}

// dstCase is a week in which the clocks change, with clicks in the hours
// around the change and at both ends of the week. Instants are in UTC, because
// local times around a change are ambiguous or do not exist.
type dstCase struct {
	name, zone string
	slot       string // local
	week       string
	start, end string // UTC instants of the local Mondays 00:00
	clicks     []struct {
		hour   string // UTC
		n      int64
		during string // what it is locally
	}
	days          []string
	sundayStart   string // local hh:mm if not 00:00
	total, before int64
}

func TestDaysAndWeekBoundariesAcrossDSTChanges(t *testing.T) {
	t.Parallel()
	type click = struct {
		hour   string
		n      int64
		during string
	}
	cases := []dstCase{{
		name: "Europe/Paris spring forward (Sunday 29 March 2026, 02:00 CET -> 03:00 CEST)",
		zone: "Europe/Paris", slot: "2026-03-30 08:00", week: "2026-W13",
		start: "2026-03-22 23:00", end: "2026-03-29 22:00", // 167 hours
		clicks: []click{
			{"2026-03-22 22:00", 1000, "Sunday 22 March 23:00 CET: the week before"},
			{"2026-03-22 23:00", 1, "Monday 00:00 CET: first hour"},
			{"2026-03-28 22:00", 2, "Saturday 23:00 CET"},
			{"2026-03-28 23:00", 4, "Sunday 00:00 CET"},
			{"2026-03-29 00:00", 8, "Sunday 01:00 CET: the last hour before the jump"},
			{"2026-03-29 01:00", 16, "Sunday 03:00 CEST: the first hour after it"},
			{"2026-03-29 21:00", 32, "Sunday 23:00 CEST: last hour of the week"},
			{"2026-03-29 22:00", 1000, "Monday 30 March 00:00 CEST: the next week"},
		},
		days: []string{
			"Mon 2026-03-23 24h 1", "Tue 2026-03-24 24h 0", "Wed 2026-03-25 24h 0", "Thu 2026-03-26 24h 0",
			"Fri 2026-03-27 24h 0", "Sat 2026-03-28 24h 2", "Sun 2026-03-29 23h 60",
		},
		total: 63, before: 1000,
	}, {
		name: "Europe/Paris fall back (Sunday 25 October 2026, 03:00 CEST -> 02:00 CET)",
		zone: "Europe/Paris", slot: "2026-10-26 08:00", week: "2026-W43",
		start: "2026-10-18 22:00", end: "2026-10-25 23:00", // 169 hours
		clicks: []click{
			{"2026-10-18 21:00", 1000, "Sunday 18 October 23:00 CEST: the week before"},
			{"2026-10-18 22:00", 1, "Monday 00:00 CEST: first hour"},
			{"2026-10-24 21:00", 2, "Saturday 23:00 CEST"},
			{"2026-10-24 22:00", 4, "Sunday 00:00 CEST"},
			{"2026-10-25 00:00", 8, "Sunday 02:00 CEST, the first 02:00"},
			{"2026-10-25 01:00", 16, "Sunday 02:00 CET, the second 02:00"},
			{"2026-10-25 22:00", 32, "Sunday 23:00 CET: last hour of the week"},
			{"2026-10-25 23:00", 1000, "Monday 26 October 00:00 CET: the next week"},
		},
		days: []string{
			"Mon 2026-10-19 24h 1", "Tue 2026-10-20 24h 0", "Wed 2026-10-21 24h 0", "Thu 2026-10-22 24h 0",
			"Fri 2026-10-23 24h 0", "Sat 2026-10-24 24h 2", "Sun 2026-10-25 25h 60",
		},
		total: 63, before: 1000,
	}, {
		name: "America/New_York spring forward (Sunday 8 March 2026, 02:00 EST -> 03:00 EDT)",
		zone: "America/New_York", slot: "2026-03-09 08:00", week: "2026-W10",
		start: "2026-03-02 05:00", end: "2026-03-09 04:00", // 167 hours
		clicks: []click{
			{"2026-03-02 04:00", 1000, "Sunday 1 March 23:00 EST: the week before"},
			{"2026-03-02 05:00", 1, "Monday 00:00 EST: first hour"},
			{"2026-03-08 04:00", 2, "Saturday 23:00 EST"},
			{"2026-03-08 05:00", 4, "Sunday 00:00 EST"},
			{"2026-03-08 06:00", 8, "Sunday 01:00 EST: the last hour before the jump"},
			{"2026-03-08 07:00", 16, "Sunday 03:00 EDT: the first hour after it"},
			{"2026-03-09 03:00", 32, "Sunday 23:00 EDT: last hour of the week"},
			{"2026-03-09 04:00", 1000, "Monday 9 March 00:00 EDT: the next week"},
		},
		days: []string{
			"Mon 2026-03-02 24h 1", "Tue 2026-03-03 24h 0", "Wed 2026-03-04 24h 0", "Thu 2026-03-05 24h 0",
			"Fri 2026-03-06 24h 0", "Sat 2026-03-07 24h 2", "Sun 2026-03-08 23h 60",
		},
		total: 63, before: 1000,
	}, {
		name: "America/New_York fall back (Sunday 1 November 2026, 02:00 EDT -> 01:00 EST)",
		zone: "America/New_York", slot: "2026-11-02 08:00", week: "2026-W44",
		start: "2026-10-26 04:00", end: "2026-11-02 05:00", // 169 hours
		clicks: []click{
			{"2026-10-26 03:00", 1000, "Sunday 25 October 23:00 EDT: the week before"},
			{"2026-10-26 04:00", 1, "Monday 00:00 EDT: first hour"},
			{"2026-11-01 03:00", 2, "Saturday 31 October 23:00 EDT"},
			{"2026-11-01 04:00", 4, "Sunday 00:00 EDT"},
			{"2026-11-01 05:00", 8, "Sunday 01:00 EDT, the first 01:00"},
			{"2026-11-01 06:00", 16, "Sunday 01:00 EST, the second 01:00"},
			{"2026-11-02 04:00", 32, "Sunday 23:00 EST: last hour of the week"},
			{"2026-11-02 05:00", 1000, "Monday 2 November 00:00 EST: the next week"},
		},
		days: []string{
			"Mon 2026-10-26 24h 1", "Tue 2026-10-27 24h 0", "Wed 2026-10-28 24h 0", "Thu 2026-10-29 24h 0",
			"Fri 2026-10-30 24h 0", "Sat 2026-10-31 24h 2", "Sun 2026-11-01 25h 60",
		},
		total: 63, before: 1000,
	}, {
		name: "America/Havana spring forward at midnight (Sunday 8 March 2026 starts at 01:00 CDT)",
		zone: "America/Havana", slot: "2026-03-09 08:00", week: "2026-W10",
		start: "2026-03-02 05:00", end: "2026-03-09 04:00",
		clicks: []click{
			{"2026-03-02 04:00", 1000, "Sunday 1 March 23:00 CST: the week before"},
			{"2026-03-02 05:00", 1, "Monday 00:00 CST: first hour"},
			{"2026-03-08 04:00", 2, "Saturday 23:00 CST: the last hour before the jump"},
			{"2026-03-08 05:00", 4, "Sunday 01:00 CDT: Sunday's first hour"},
			{"2026-03-09 03:00", 8, "Sunday 23:00 CDT: last hour of the week"},
			{"2026-03-09 04:00", 1000, "Monday 9 March 00:00 CDT: the next week"},
		},
		days: []string{
			"Mon 2026-03-02 24h 1", "Tue 2026-03-03 24h 0", "Wed 2026-03-04 24h 0", "Thu 2026-03-05 24h 0",
			"Fri 2026-03-06 24h 0", "Sat 2026-03-07 24h 2", "Sun 2026-03-08 23h 12",
		},
		sundayStart: "01:00",
		total:       15, before: 1000,
	}, {
		name: "America/Havana fall back at midnight (Sunday 1 November 2026 has two 00:00)",
		zone: "America/Havana", slot: "2026-11-02 08:00", week: "2026-W44",
		start: "2026-10-26 04:00", end: "2026-11-02 05:00",
		clicks: []click{
			{"2026-10-26 03:00", 1000, "Sunday 25 October 23:00 CDT: the week before"},
			{"2026-10-26 04:00", 1, "Monday 00:00 CDT: first hour"},
			{"2026-11-01 03:00", 2, "Saturday 31 October 23:00 CDT"},
			{"2026-11-01 04:00", 4, "Sunday 00:00 CDT, the first midnight: Sunday starts here"},
			{"2026-11-01 05:00", 8, "Sunday 00:00 CST, the second midnight"},
			{"2026-11-02 04:00", 16, "Sunday 23:00 CST: last hour of the week"},
			{"2026-11-02 05:00", 1000, "Monday 2 November 00:00 CST: the next week"},
		},
		days: []string{
			"Mon 2026-10-26 24h 1", "Tue 2026-10-27 24h 0", "Wed 2026-10-28 24h 0", "Thu 2026-10-29 24h 0",
			"Fri 2026-10-30 24h 0", "Sat 2026-10-31 24h 2", "Sun 2026-11-01 25h 28",
		},
		total: 31, before: 1000,
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := newDB(t)
			loc := mustLoad(t, c.zone)
			d.links(map[int64]string{1: "one"})
			for _, cl := range c.clicks {
				d.clicks(1, utc(cl.hour), cl.n)
			}
			slot := at(loc, c.slot)
			d.mustRunSlot(newJob(t, c.zone, nil), slot, 100, "server-1")

			r := d.show(c.week)
			if !r.Start.Equal(utc(c.start)) || !r.End.Equal(utc(c.end)) {
				t.Errorf("week %v to %v, want %s to %s UTC", r.Start, r.End, c.start, c.end)
			}
			if got := days(r); !slices.Equal(got, c.days) {
				t.Errorf("days\n%q\nwant\n%q", got, c.days)
			}
			if r.Total != c.total || r.PreviousTotal != c.before {
				t.Errorf("total %d, week before %d; want %d, %d", r.Total, r.PreviousTotal, c.total, c.before)
			}
			// Each day starts at local midnight, or when the clocks jump if
			// they skip it.
			for i, day := range r.Days {
				want := day.Date + " 00:00"
				if i == 6 && c.sundayStart != "" {
					want = day.Date + " " + c.sundayStart
				}
				if got := day.Start.In(loc).Format("2006-01-02 15:04"); got != want {
					t.Errorf("%s starts at %s local, want %s", day.Date, got, want)
				}
			}
			if got := d.slotState(jobName, slot); got != "done by 100" {
				t.Errorf("slot: %s, want done by 100", got)
			}
		})
	}
}

func TestAWeekWithNoClicksGivesAnEmptyReport(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	paris := mustLoad(t, "Europe/Paris")
	d.links(map[int64]string{1: "alpha"})
	d.clicks(1, at(paris, "2026-11-15 23:00"), 3) // only the week before has clicks
	slot := at(paris, "2026-11-23 08:00")
	d.mustRunSlot(newJob(t, "Europe/Paris", nil), slot, 100, "server-1")

	r := d.show("2026-W47")
	if r.Total != 0 || r.LinksClicked != 0 || len(r.Top) != 0 || len(r.GrewMost) != 0 || len(r.GrewFastest) != 0 {
		t.Errorf("report of a week without clicks: total %d, links %d, top %v, grew %v %v",
			r.Total, r.LinksClicked, r.Top, r.GrewMost, r.GrewFastest)
	}
	if r.PreviousTotal != 3 {
		t.Errorf("week before: %d clicks, want 3", r.PreviousTotal)
	}
	wantDays := []string{
		"Mon 2026-11-16 24h 0", "Tue 2026-11-17 24h 0", "Wed 2026-11-18 24h 0", "Thu 2026-11-19 24h 0",
		"Fri 2026-11-20 24h 0", "Sat 2026-11-21 24h 0", "Sun 2026-11-22 24h 0",
	}
	if got := days(r); !slices.Equal(got, wantDays) {
		t.Errorf("days %q, want %q", got, wantDays)
	}
	// The mailer gets empty lists, not nulls.
	var body map[string]json.RawMessage
	if err := json.Unmarshal([]byte(d.str(`SELECT body::text FROM weekly_reports WHERE week = '2026-W47'`)), &body); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"top_links", "grew_most", "grew_fastest"} {
		if string(body[key]) != "[]" {
			t.Errorf("body %s = %s, want []", key, body[key])
		}
	}
	wantText := `Snip weekly report 2026-W47
Monday 16 November 2026 to Sunday 22 November 2026 (Europe/Paris)

Clicks: 0 on 0 links (2026-W46: 3, -100.0%)

Clicks per day
  Mon 16 Nov  0
  Tue 17 Nov  0
  Wed 18 Nov  0
  Thu 19 Nov  0
  Fri 20 Nov  0
  Sat 21 Nov  0
  Sun 22 Nov  0

Top links
  none

Grew most against 2026-W46
  none

Grew fastest against 2026-W46 (links with at least 10 clicks then)
  none
`
	if got := d.stored("2026-W47").Text; got != wantText {
		t.Errorf("text:\n%s\nwant:\n%s", got, wantText)
	}
	if n := len(d.outbox()); n != 1 {
		t.Errorf("%d outbox rows, want 1: an empty week is reported too", n)
	}
	if got := d.slotState(jobName, slot); got != "done by 100" {
		t.Errorf("slot: %s, want done by 100", got)
	}
}

func TestTimeZonesWithoutWholeHourOffsetsAreRefused(t *testing.T) {
	t.Parallel()
	for zone, offset := range map[string]string{
		"Asia/Kolkata":        "+05:30",
		"Asia/Kathmandu":      "+05:45",
		"Australia/Lord_Howe": "+10:30", // and +11:00 in summer: 30-minute DST
		"America/St_Johns":    "-03:30",
	} {
		_, err := buildJob(zone, nil)
		if err == nil {
			t.Errorf("%s: accepted", zone)
			continue
		}
		for _, want := range []string{zone, offset, "not a whole number of hours", "per UTC hour"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %q does not say %q", zone, err, want)
			}
		}
	}
	for _, zone := range []string{"UTC", "Europe/Paris", "America/New_York", "Asia/Tokyo", "Australia/Sydney",
		"America/Caracas"} { // -04:30 from 2007 to 2016 only: see the next test
		if _, err := buildJob(zone, nil); err != nil {
			t.Errorf("%s: %v", zone, err)
		}
	}
}

func TestAWeekWhenTheZoneHadAHalfHourOffsetIsRefusedWhenBuilt(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	caracas := mustLoad(t, "America/Caracas") // UTC-04:30 from December 2007 to May 2016
	j := newJob(t, "America/Caracas", nil)
	slot := at(caracas, "2010-06-14 08:00")
	err := d.runSlot(j, jobName, slot, 100, "server-1")
	if err == nil || !strings.Contains(err.Error(), "-04:30") || !strings.Contains(err.Error(), "2010-W23") {
		t.Errorf("week 2010-W23 in America/Caracas: error %v, want one naming the week and -04:30", err)
	}
	if got := d.weeks(); len(got) != 0 {
		t.Errorf("weeks stored: %v, want none", got)
	}
	if got := d.slotState(jobName, slot); got != "running by 100" {
		t.Errorf("slot: %s, want still running by 100 (not completed)", got)
	}
}

func TestNewRefusesAJobThatCannotWork(t *testing.T) {
	t.Parallel()
	paris := mustLoad(t, "Europe/Paris")
	weekly := func(change func(*configs.Job)) configs.Job {
		j := configs.Job{
			Name: jobName, Type: "weeklyreport", Singleton: true,
			Schedule: configs.Schedule{Kind: configs.Cron, Cron: "0 8 * * MON", Location: paris},
		}
		change(&j)
		return j
	}
	for _, c := range []struct {
		job  configs.Job
		want string
	}{
		{weekly(func(j *configs.Job) { j.Schedule = configs.Schedule{Kind: configs.Interval, Every: time.Hour} }),
			"needs a cron: schedule"},
		{weekly(func(j *configs.Job) { j.Singleton = false }), "must be a singleton"},
		{weekly(func(j *configs.Job) {
			j.Options = jobtest.Options(t, weeklyreport.Options{Top: 0, Growth: 10, GrowthMinPrevious: 10})
		}), "top must be from 1 to 1000, not 0"},
	} {
		_, err := weeklyreport.Type().Build(scheduler.Env{Instance: "test"}, c.job)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want one saying %q", err, c.want)
		}
	}
}

func TestOptions(t *testing.T) {
	t.Parallel()
	typ := weeklyreport.Type()
	if typ.Name != "weeklyreport" {
		t.Errorf("type name %q", typ.Name)
	}
	checked, err := typ.Options(configs.Job{Name: jobName, Type: "weeklyreport"})
	opts, ok := checked.Effective.(weeklyreport.Options)
	if err != nil || !ok || opts != (weeklyreport.Options{Top: 10, Growth: 10, GrowthMinPrevious: 10}) {
		t.Errorf("default options %+v (%v)", checked.Effective, err)
	}
	if err := opts.Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
	bad := weeklyreport.Options{Top: 1001, Growth: -1, GrowthMinPrevious: 0}
	err = bad.Validate()
	for _, want := range []string{"top must be from 1 to 1000, not 1001", "growth must be from 0", "growth_min_previous must be at least 1"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate(%+v) = %v, want it to say %q", bad, err, want)
		}
	}
	if err := (&weeklyreport.Options{Top: 1, Growth: 0, GrowthMinPrevious: 1}).Validate(); err != nil {
		t.Errorf("growth 0 (no growth lists): %v", err)
	}
}
