package weeklyreport

import (
	"fmt"
	"regexp"
	"strconv"
	"time"
)

// Dates (calendar days without a zone) are time.Times at 00:00 UTC: AddDate
// and Weekday on them are plain calendar arithmetic. Instants are any other
// time.Time.

// date returns the calendar day of t in loc.
func date(t time.Time, loc *time.Location) time.Time {
	y, m, d := t.In(loc).Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// mondayOf returns the Monday of the ISO week that contains day d.
func mondayOf(d time.Time) time.Time {
	return d.AddDate(0, 0, -((int(d.Weekday()) + 6) % 7))
}

// weekLabel names the ISO week that starts on Monday m, e.g. "2026-W47".
func weekLabel(m time.Time) string {
	y, w := m.ISOWeek()
	return fmt.Sprintf("%04d-W%02d", y, w)
}

var weekPattern = regexp.MustCompile(`^([0-9]{4})-W([0-9]{2})$`)

// parseWeek returns the Monday of an ISO week written as "2026-W47".
func parseWeek(s string) (time.Time, error) {
	m := weekPattern.FindStringSubmatch(s)
	if m == nil {
		return time.Time{}, fmt.Errorf("week %q: write an ISO week as YYYY-Www, e.g. 2026-W47", s)
	}
	year, _ := strconv.Atoi(m[1])
	week, _ := strconv.Atoi(m[2])
	// Week 1 is the week with the year's first Thursday, i.e. with 4 January.
	jan4 := time.Date(year, time.January, 4, 0, 0, 0, 0, time.UTC)
	monday := mondayOf(jan4).AddDate(0, 0, 7*(week-1))
	if week < 1 || weekLabel(monday) != s {
		return time.Time{}, fmt.Errorf("week %q: %d has no ISO week %d", s, year, week)
	}
	return monday, nil
}

// dayStart returns the first instant of day d in loc. Where midnight falls in
// a DST gap the day starts when the clocks jump (e.g. 01:00); where it comes
// twice, at the first.
func dayStart(d time.Time, loc *time.Location) time.Time {
	y, m, dd := d.Date()
	t := time.Date(y, m, dd, 0, 0, 0, 0, loc)
	if date(t, loc).Equal(d) && date(t.Add(-time.Second), loc).Before(d) {
		return t // the usual case
	}
	// time.Date picked the wrong side of a transition: find the first second
	// whose local day is d. The local day only grows with the instant.
	lo, hi := t.Add(-48*time.Hour).Unix(), t.Add(48*time.Hour).Unix() // day(lo) < d <= day(hi)
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if date(time.Unix(mid, 0), loc).Before(d) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return time.Unix(hi, 0).In(loc)
}

// span is the week a report covers and the week before it, as instants.
type span struct {
	label, previous string         // ISO weeks, e.g. "2026-W47" and "2026-W46"
	monday          time.Time      // the report's first day (a date)
	loc             *time.Location // whose calendar the days are
	// bounds are the starts of the 14 days from the previous week's Monday to
	// the report week's Sunday, then the next Monday's start: days 0-6 are
	// the previous week, 7-13 the report's week.
	bounds [15]time.Time
}

// weekBefore returns the span of the last calendar week in loc that ended at
// or before the instant slot: for a slot on Monday 08:00, the week that ended
// eight hours earlier.
func weekBefore(slot time.Time, loc *time.Location) (span, error) {
	return weekStarting(mondayOf(date(slot, loc)).AddDate(0, 0, -7), loc)
}

// weekStarting returns the span of the week whose Monday is monday, in loc.
// It fails if a day boundary does not fall on a whole UTC hour: clicks are
// counted per UTC hour, so such a day cannot be summed exactly.
func weekStarting(monday time.Time, loc *time.Location) (span, error) {
	s := span{
		label:    weekLabel(monday),
		previous: weekLabel(monday.AddDate(0, 0, -7)),
		monday:   monday,
		loc:      loc,
	}
	for i := range s.bounds {
		d := monday.AddDate(0, 0, i-7)
		s.bounds[i] = dayStart(d, loc)
		if err := checkDayStart(d, s.bounds[i], loc); err != nil {
			return span{}, fmt.Errorf("week %s: %w", s.label, err)
		}
	}
	return s, nil
}

// start and end are the report week's first instant and the next week's.
func (s span) start() time.Time { return s.bounds[7] }
func (s span) end() time.Time   { return s.bounds[14] }

// checkDayStart says why day d, starting at start, cannot be summed from UTC
// hours; nil if it can.
func checkDayStart(d, start time.Time, loc *time.Location) error {
	_, offset := start.In(loc).Zone()
	if offset%3600 != 0 {
		return fmt.Errorf("time zone %s has UTC offset %s on %s, not a whole number of hours: "+
			"clicks are counted per UTC hour, so its local days cannot be summed exactly",
			loc, formatOffset(offset), d.Format(time.DateOnly))
	}
	if !start.Truncate(time.Hour).Equal(start) {
		return fmt.Errorf("time zone %s: %s starts at %s, not on a whole UTC hour: "+
			"clicks are counted per UTC hour, so this day cannot be summed exactly",
			loc, d.Format(time.DateOnly), start.UTC().Format(time.RFC3339))
	}
	return nil
}

func formatOffset(seconds int) string {
	sign := '+'
	if seconds < 0 {
		sign, seconds = '-', -seconds
	}
	s := fmt.Sprintf("%c%02d:%02d", sign, seconds/3600, seconds/60%60)
	if seconds%60 != 0 {
		s += fmt.Sprintf(":%02d", seconds%60)
	}
	return s
}

// The range of days checkZone checks. Zones whose offsets were not whole hours
// before zoneCheckFrom (every zone's local mean time; Caracas's -04:30 of
// 2007-2016) are accepted: a week in that past is checked again when it is
// built, and refused if it cannot be summed.
var (
	zoneCheckFrom = time.Date(2020, time.January, 1, 0, 0, 0, 0, time.UTC)
	zoneCheckTo   = time.Date(2100, time.January, 1, 0, 0, 0, 0, time.UTC)
)

// checkZone reports the first day from zoneCheckFrom to zoneCheckTo whose
// start cannot be summed from UTC hours in loc.
func checkZone(loc *time.Location) error {
	for d := zoneCheckFrom; d.Before(zoneCheckTo); d = d.AddDate(0, 0, 1) {
		if err := checkDayStart(d, dayStart(d, loc), loc); err != nil {
			return err
		}
	}
	return nil
}
