package configs

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
	_ "time/tzdata" // time zones check the same on every server, whatever its tzdata package

	"github.com/robfig/cron/v3"
)

// Lower bounds of an interval schedule: a run a second is as often as a job
// that competes for a term, a connection and a fenced row should be started.
const (
	MinEvery  = time.Second
	MinJitter = time.Second // or 0: none
)

// cronReference is where "does this cron spec ever fire?" starts looking. A fixed
// instant keeps Parse independent of the clock; the cron library looks five
// years ahead, which covers every leap day.
var cronReference = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// cronOnlyKeys apply only to cron jobs.
var cronOnlyKeys = []string{"timezone", "coordination", "catch_up", "catch_up_window"}

// readSchedule reads a job entry's schedule: exactly one of continuous, every
// and cron (the type's defaults d give one to an entry that writes none), with
// only the keys that apply to it. Every schedule key is read whatever the kind,
// so that a bad value is reported as such and not as an unknown key.
func readSchedule(m *mapping, j Job, d Defaults) Schedule {
	c := chooseSchedule(m, j, d)
	// Jitter belongs to interval jobs.
	jitter, hasJitter := m.duration("jitter", zeroOrPositive)
	if !m.has("jitter") && d.Jitter > 0 && c.kind == "every" && !m.has("every") {
		jitter, hasJitter = d.Jitter, true
	}
	if m.has("jitter") && c.kind != "" && c.kind != "every" {
		m.errorf(m.keyPos("jitter"), "jitter applies only to every: schedules, not %s", c.kind)
	}
	// Keys of cron jobs.
	for _, key := range cronOnlyKeys {
		if m.has(key) && c.kind != "" && c.kind != "cron" {
			m.errorf(m.keyPos(key), "%s applies only to cron: schedules, not %s", key, c.kind)
		}
	}

	var s Schedule
	switch c.kind {
	case "continuous":
		s.Kind = Continuous
	case "every":
		s = intervalSchedule(m, c, jitter, hasJitter)
	case "cron":
		s.Kind = Cron
		readCron(m, j, &s, c.spec, c.hasCron, d)
	}
	if s.Kind != Cron {
		// Read the cron-only keys anyway so that their own problems are reported
		// (and they are not also reported as unknown).
		var scratch Schedule
		readCron(m, j, &scratch, "", false, d)
	}
	return s
}

// scheduleChoice is the schedule an entry chose (or its type's defaults gave it).
type scheduleChoice struct {
	kind     string // continuous, every or cron; "" when none or more than one is chosen
	every    time.Duration
	hasEvery bool
	spec     string
	hasCron  bool
}

// chooseSchedule reads continuous, every and cron, falling back on the type's
// defaults d when none is written, and reports none or more than one.
func chooseSchedule(m *mapping, j Job, d Defaults) scheduleChoice {
	var c scheduleChoice
	var chosen []string
	// A key whose value is bad still counts as chosen: its own problem is reported,
	// not a missing schedule.
	if continuous, ok := m.boolean("continuous"); continuous || (!ok && m.has("continuous")) {
		chosen = append(chosen, "continuous")
	}
	c.every, c.hasEvery = m.duration("every", positive)
	if m.has("every") {
		chosen = append(chosen, "every")
	}
	c.spec, c.hasCron = m.str("cron")
	if m.has("cron") {
		chosen = append(chosen, "cron")
	}
	switch {
	case len(chosen) == 0 && d.Cron != "":
		chosen, c.spec, c.hasCron = []string{"cron"}, d.Cron, true
	case len(chosen) == 0 && d.Every > 0:
		chosen, c.every, c.hasEvery = []string{"every"}, d.Every, true
	}
	switch len(chosen) {
	case 0:
		m.errorf(j.Pos, "job has no schedule: set one of continuous: true, every: <duration> or cron: <spec>")
	case 1:
		c.kind = chosen[0]
	default:
		slices.SortFunc(chosen, func(a, b string) int { return comparePos(m.keyPos(a), m.keyPos(b)) })
		var listed []string
		for _, k := range chosen {
			listed = append(listed, fmt.Sprintf("%s (line %d)", k, m.keyPos(k).Line))
		}
		m.errorf(m.keyPos(chosen[1]), "job has more than one schedule: %s; choose one", strings.Join(listed, ", "))
	}
	return c
}

// intervalSchedule checks an every: schedule's interval and jitter (each
// written, or from the type's defaults).
func intervalSchedule(m *mapping, c scheduleChoice, jitter time.Duration, hasJitter bool) Schedule {
	s := Schedule{Kind: Interval}
	every, hasEvery := c.every, c.hasEvery
	if hasEvery && every < MinEvery && m.has("every") {
		m.errorf(m.valuePos("every"), "every %s is too short: the least is %s", fmtDuration(every), fmtDuration(MinEvery))
		hasEvery = false
	}
	if hasJitter && jitter > 0 && jitter < MinJitter && m.has("jitter") {
		m.errorf(m.valuePos("jitter"), "jitter %s is too short: 0 (none) or at least %s", fmtDuration(jitter), fmtDuration(MinJitter))
		hasJitter = false
	}
	if hasEvery {
		s.Every = every
		if hasJitter && jitter >= every {
			m.errorf(m.valuePos("jitter"), "jitter %s must be less than every %s", fmtDuration(jitter), fmtDuration(every))
		} else if hasJitter {
			s.Jitter = jitter
		}
	}
	return s
}

// readCron reads a cron job's spec (if hasSpec), time zone, coordination and
// catch-up settings into s, with the type's defaults d for what is left out.
// For a job of another kind, s is left with its Kind only.
func readCron(m *mapping, j Job, s *Schedule, spec string, hasSpec bool, d Defaults) {
	s.Location = time.UTC
	if tz, ok := m.str("timezone"); ok {
		loc, msg := loadLocation(tz)
		if msg != "" {
			m.errorf(m.valuePos("timezone"), "timezone %q %s", tz, msg)
		} else {
			s.Location = loc
		}
	}
	if hasSpec {
		s.Cron = spec
		if sched, msg := parseCron(spec, s.Location); msg != "" {
			m.errorf(m.valuePos("cron"), "cron %q: %s", spec, msg)
		} else {
			s.Spec = sched
		}
	}
	readCoordination(m, j, s)
	readCatchUp(m, s, d)
	if s.Kind != Cron {
		*s = Schedule{Kind: s.Kind}
	}
}

// readCoordination reads who decides a cron job's slots: its leader or the
// database. Only a singleton has either.
func readCoordination(m *mapping, j Job, s *Schedule) {
	c, ok := m.str("coordination")
	if !ok {
		return
	}
	switch c {
	case "leader":
		s.Coordination = Leader
	case "database":
		s.Coordination = Database
	default:
		m.errorf(m.valuePos("coordination"), "coordination %q must be leader or database", c)
	}
	if !j.Singleton && s.Kind == Cron {
		m.errorf(m.keyPos("coordination"), "coordination applies only to singleton jobs; this job runs on every instance (singleton: false)")
	}
}

// readCatchUp reads what a cron job does with missed slots, and how far back
// it looks, with the type's defaults d.
func readCatchUp(m *mapping, s *Schedule, d Defaults) {
	s.CatchUp = d.CatchUp
	if c, ok := m.str("catch_up"); ok {
		switch c {
		case "latest":
			s.CatchUp = Latest
		case "all":
			s.CatchUp = All
		case "none":
			s.CatchUp = None
		default:
			m.errorf(m.valuePos("catch_up"), "catch_up %q must be latest, all or none", c)
		}
	}
	s.CatchUpWindow = cmp.Or(d.CatchUpWindow, DefaultCatchUpWindow)
	if w, ok := m.duration("catch_up_window", zeroOrPositive); ok {
		if s.CatchUp == None && m.has("catch_up") {
			m.errorf(m.keyPos("catch_up_window"), "catch_up_window has no effect with catch_up: none")
		}
		if w > 0 {
			s.CatchUpWindow = w
		}
	}
}

// loadLocation accepts IANA zone names. "Local" is refused: it would mean a
// different zone on each server.
func loadLocation(name string) (*time.Location, string) {
	if name == "" || name == "Local" {
		return nil, "is not allowed: use an IANA name such as Europe/Paris, or UTC"
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, "is not a known time zone: use an IANA name such as Europe/Paris, or UTC"
	}
	return loc, ""
}

// parseCron parses a standard 5-field spec or a descriptor (@daily...) and makes
// its times fall in loc.
func parseCron(spec string, loc *time.Location) (cron.Schedule, string) {
	trimmed := strings.TrimSpace(spec)
	switch {
	case strings.HasPrefix(trimmed, "TZ=") || strings.HasPrefix(trimmed, "CRON_TZ="):
		// Also avoids a panic in cron v3.0.1 on a TZ= prefix with nothing after it.
		return nil, "put the time zone in timezone:, not in the spec"
	case strings.HasPrefix(trimmed, "@every"):
		return nil, "use every: for intervals; cron: is for times of day, e.g. \"0 8 * * MON\""
	}
	sched, err := cron.ParseStandard(trimmed)
	if err != nil {
		return nil, err.Error() + ` (five fields: minute hour day-of-month month day-of-week, e.g. "0 8 * * MON", or @hourly, @daily, @weekly, @monthly, @yearly)`
	}
	spec5, ok := sched.(*cron.SpecSchedule)
	if !ok {
		return nil, fmt.Sprintf("unexpected schedule type %T", sched)
	}
	// ParseStandard leaves Location at time.Local, which SpecSchedule.Next reads as
	// "the location of the time passed in"; pin it to the job's zone.
	spec5.Location = loc
	if spec5.Next(cronReference.In(loc)).IsZero() {
		return nil, "never fires (no date matches it)"
	}
	return spec5, ""
}
