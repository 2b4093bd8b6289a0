package configs

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
	_ "time/tzdata" // time zones check the same on every server, whatever its tzdata package

	"github.com/goccy/go-yaml/ast"
	"github.com/robfig/cron/v3"
)

// Lower bounds of an interval schedule: a run a second is as often as a job
// that competes for a term, a connection and a fenced row should be started.
const (
	MinEvery  = time.Second
	MinJitter = time.Second // or 0: none
)

var jobName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)

// cronReference is where "does this cron spec ever fire?" starts looking. A fixed
// instant keeps Parse independent of the clock; the cron library looks five
// years ahead, which covers every leap day.
var cronReference = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

func (p *parser) jobs(top *mapping) []Job {
	_, v, ok := top.get("jobs")
	if !ok {
		return nil
	}
	seq, isSeq := v.(*ast.SequenceNode)
	if !isSeq {
		top.errorf(p.pos(v), "jobs must be a list of jobs (entries starting with -), not %s", describe(v))
		return nil
	}
	var jobs []Job
	names := map[string]Pos{} // name → where the first job of that name has it
	for _, n := range seq.Values {
		if j, ok := p.job(n, names); ok {
			jobs = append(jobs, j)
		}
	}
	return jobs
}

// job reads one entry of the jobs list. ok is false when the entry is not a
// mapping at all.
func (p *parser) job(n ast.Node, names map[string]Pos) (Job, bool) {
	r := p.resolve(n, "")
	if r == nil { // an alias naming no anchor: already reported
		return Job{}, false
	}
	if isNull(r) {
		p.errorf(p.pos(n), "", "empty job entry: a job needs at least name, type and a schedule")
		return Job{}, false
	}
	if _, isMap := mappingValues(r); !isMap {
		p.errorf(p.pos(r), "", "a job must be a mapping (name: ..., type: ...), not %s", describe(r))
		return Job{}, false
	}
	m := p.mapping(n, "", "")
	j := Job{Pos: p.pos(n), Singleton: true, Grace: DefaultGrace}

	// The name first: every other message about this job carries it.
	if name, ok := m.str("name"); ok {
		j.Name = name
		m.job = name
		if !jobName.MatchString(name) {
			m.errorf(m.valuePos("name"), "job name %q: use lower-case letters, digits and '-', starting with a letter or digit", name)
		} else if first, dup := names[name]; dup {
			m.errorf(m.valuePos("name"), "job name %q is already used by the job at line %d", name, first.Line)
		} else {
			names[name] = m.valuePos("name")
		}
	} else if !m.has("name") {
		m.errorf(j.Pos, "job has no name: add name: <lower-case-name>")
	}

	typeKnown := false
	if typ, ok := m.str("type"); ok {
		j.Type = typ
		typeKnown = p.knownType(typ)
		if !typeKnown {
			m.errorf(m.valuePos("type"), "unknown job type %q; known types: %s", typ, p.typeNames())
		}
	} else if !m.has("type") {
		m.errorf(j.Pos, "job has no type: add type: <one of %s>", p.typeNames())
	}

	if s, ok := m.boolean("singleton"); ok {
		j.Singleton = s
	}
	j.Schedule = p.schedule(m, j)
	if d, ok := m.duration("grace", zeroOrPositive); ok && d > 0 {
		j.Grace = d
	}
	if d, ok := m.duration("progress_timeout", zeroOrPositive); ok {
		switch {
		case d > 0 && j.Mode() == ModeEverywhere:
			m.errorf(m.keyPos("progress_timeout"), "progress_timeout applies only to singleton jobs (the watchdog ends a term)")
		case d > 0 && j.Mode() == ModeDatabase:
			m.errorf(m.keyPos("progress_timeout"), "progress_timeout applies only to coordination: leader (the watchdog ends a term; a database-mode job has none)")
		}
		j.ProgressTimeout = d
	}
	j.Options = p.options(m, j, typeKnown)
	m.finish()
	return j, true
}

func (p *parser) knownType(typ string) bool {
	if p.types == nil {
		return false
	}
	_, ok := p.types.Options(typ)
	return ok
}

func (p *parser) typeNames() string {
	if p.types == nil {
		return "(none registered)"
	}
	names := slices.Clone(p.types.Names())
	if len(names) == 0 {
		return "(none registered)"
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// cronOnlyKeys apply only to cron jobs.
var cronOnlyKeys = []string{"timezone", "coordination", "catch_up", "catch_up_window"}

// defaults are the job type's defaults (none for an unknown type).
func (p *parser) defaults(typ string) Defaults {
	if d, ok := p.types.(TypeDefaults); ok && p.knownType(typ) {
		return d.Defaults(typ)
	}
	return Defaults{}
}

func (p *parser) schedule(m *mapping, j Job) Schedule {
	var s Schedule
	var chosen []string
	d := p.defaults(j.Type)
	// A key whose value is bad still counts as chosen: its own problem is reported,
	// not a missing schedule.
	if continuous, ok := m.boolean("continuous"); continuous || (!ok && m.has("continuous")) {
		chosen = append(chosen, "continuous")
	}
	every, hasEvery := m.duration("every", positive)
	if m.has("every") {
		chosen = append(chosen, "every")
	}
	spec, hasCron := m.str("cron")
	if m.has("cron") {
		chosen = append(chosen, "cron")
	}
	switch {
	case len(chosen) == 0 && d.Cron != "":
		chosen, spec, hasCron = []string{"cron"}, d.Cron, true
	case len(chosen) == 0 && d.Every > 0:
		chosen, every, hasEvery = []string{"every"}, d.Every, true
	}
	switch len(chosen) {
	case 0:
		m.errorf(j.Pos, "job has no schedule: set one of continuous: true, every: <duration> or cron: <spec>")
	case 1:
	default:
		slices.SortFunc(chosen, func(a, b string) int { return comparePos(m.keyPos(a), m.keyPos(b)) })
		var listed []string
		for _, k := range chosen {
			listed = append(listed, fmt.Sprintf("%s (line %d)", k, m.keyPos(k).Line))
		}
		m.errorf(m.keyPos(chosen[1]), "job has more than one schedule: %s; choose one", strings.Join(listed, ", "))
	}
	kind := ""
	if len(chosen) == 1 {
		kind = chosen[0]
	}

	// Jitter belongs to interval jobs.
	jitter, hasJitter := m.duration("jitter", zeroOrPositive)
	if !m.has("jitter") && d.Jitter > 0 && kind == "every" && !m.has("every") {
		jitter, hasJitter = d.Jitter, true
	}
	if m.has("jitter") && kind != "" && kind != "every" {
		m.errorf(m.keyPos("jitter"), "jitter applies only to every: schedules, not %s", kind)
	}
	// Keys of cron jobs.
	for _, key := range cronOnlyKeys {
		if m.has(key) && kind != "" && kind != "cron" {
			m.errorf(m.keyPos(key), "%s applies only to cron: schedules, not %s", key, kind)
		}
	}

	switch kind {
	case "continuous":
		s.Kind = Continuous
	case "every":
		s.Kind = Interval
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
	case "cron":
		s.Kind = Cron
		p.cronSchedule(m, j, &s, spec, hasCron, d)
	}
	if s.Kind != Cron {
		// Read the cron-only keys anyway so that their own problems are reported
		// (and they are not also reported as unknown).
		var scratch Schedule
		p.cronSchedule(m, j, &scratch, "", false, d)
	}
	return s
}

// cronSchedule reads a cron job's spec (if hasSpec), time zone, coordination and
// catch-up settings into s, with the type's defaults d for what is left out.
func (p *parser) cronSchedule(m *mapping, j Job, s *Schedule, spec string, hasSpec bool, d Defaults) {
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

	if c, ok := m.str("coordination"); ok {
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
	if s.Kind != Cron {
		*s = Schedule{Kind: s.Kind}
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
