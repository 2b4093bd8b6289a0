package configs

import (
	"errors"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/goccy/go-yaml/ast"
)

var jobName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)

// jobReader reads the jobs list. Each entry that is a mapping becomes a Job
// whose name is checked and unique, read first so that every other problem in
// the entry carries it; whose type is one Types knows; whose schedule is read
// by readSchedule; and whose options its type has checked (OptionsType).
type jobReader struct {
	doc   *document
	types jobTypes
	names map[string]Pos // name → where the first job of that name has it
}

// list reads the jobs key of the top-level mapping, in file order.
func (r *jobReader) list(top *mapping) []Job {
	_, v, ok := top.get("jobs")
	if !ok {
		return nil
	}
	seq, isSeq := v.(*ast.SequenceNode)
	if !isSeq {
		top.errorf(r.doc.pos(v), "jobs must be a list of jobs (entries starting with -), not %s", describe(v))
		return nil
	}
	var jobs []Job
	for _, n := range seq.Values {
		if j, ok := r.job(n); ok {
			jobs = append(jobs, j)
		}
	}
	return jobs
}

// job reads one entry of the jobs list. ok is false when the entry is not a
// mapping at all.
func (r *jobReader) job(n ast.Node) (Job, bool) {
	if !r.isMapping(n) {
		return Job{}, false
	}
	m := r.doc.mapping(n, "", "")
	j := Job{Pos: r.doc.pos(n), Singleton: true, Grace: DefaultGrace}
	// The name first: every other message about this job carries it.
	j.Name = r.name(m, j.Pos)
	typ, typeKnown := r.jobType(m, j.Pos)
	j.Type = typ
	if s, ok := m.boolean("singleton"); ok {
		j.Singleton = s
	}
	j.Schedule = readSchedule(m, j, r.types.defaults(j.Type))
	if d, ok := m.duration("grace", zeroOrPositive); ok && d > 0 {
		j.Grace = d
	}
	j.ProgressTimeout = progressTimeout(m, j)
	j.Options = r.options(m, j, typeKnown)
	m.finish()
	return j, true
}

// isMapping reports whether the entry n is a mapping, reporting it if not.
func (r *jobReader) isMapping(n ast.Node) bool {
	v := r.doc.resolve(n, "")
	if v == nil { // an alias naming no anchor: already reported
		return false
	}
	if isNull(v) {
		r.doc.errorf(r.doc.pos(n), "", "empty job entry: a job needs at least name, type and a schedule")
		return false
	}
	if _, isMap := mappingValues(v); !isMap {
		r.doc.errorf(r.doc.pos(v), "", "a job must be a mapping (name: ..., type: ...), not %s", describe(v))
		return false
	}
	return true
}

// name reads the job's name and makes it the name m's problems carry. A name
// that is not a string is read as "".
func (r *jobReader) name(m *mapping, entry Pos) string {
	name, ok := m.str("name")
	if !ok {
		if !m.has("name") {
			m.errorf(entry, "job has no name: add name: <lower-case-name>")
		}
		return ""
	}
	m.job = name
	if !jobName.MatchString(name) {
		m.errorf(m.valuePos("name"), "job name %q: use lower-case letters, digits and '-', starting with a letter or digit", name)
	} else if first, dup := r.names[name]; dup {
		m.errorf(m.valuePos("name"), "job name %q is already used by the job at line %d", name, first.Line)
	} else {
		r.names[name] = m.valuePos("name")
	}
	return name
}

// jobType reads the job's type; known is whether Types knows it.
func (r *jobReader) jobType(m *mapping, entry Pos) (typ string, known bool) {
	typ, ok := m.str("type")
	if !ok {
		if !m.has("type") {
			m.errorf(entry, "job has no type: add type: <one of %s>", r.types.names())
		}
		return "", false
	}
	known = r.types.known(typ)
	if !known {
		m.errorf(m.valuePos("type"), "unknown job type %q; known types: %s", typ, r.types.names())
	}
	return typ, known
}

// progressTimeout reads the watchdog's timeout, which only a job that holds
// terms (Mode Leader) can use.
func progressTimeout(m *mapping, j Job) time.Duration {
	d, ok := m.duration("progress_timeout", zeroOrPositive)
	if !ok {
		return 0
	}
	switch {
	case d > 0 && j.Mode() == ModeEverywhere:
		m.errorf(m.keyPos("progress_timeout"), "progress_timeout applies only to singleton jobs (the watchdog ends a term)")
	case d > 0 && j.Mode() == ModeDatabase:
		m.errorf(m.keyPos("progress_timeout"), "progress_timeout applies only to coordination: leader (the watchdog ends a term; a database-mode job has none)")
	}
	return d
}

// options reads the job's options: kept as the positioned node the job's type
// decodes (OptionsType), which Parse calls here so that every problem is
// reported with the rest of the file's.
func (r *jobReader) options(m *mapping, j Job, typeKnown bool) Options {
	e, node, present := m.get("options")
	o := Options{job: j.Name, pos: j.Pos}
	if !typeKnown {
		return o
	}
	check := r.types.options(j.Type)
	if check == nil {
		if present {
			m.errorf(e.keyPos, "job type %q takes no options", j.Type)
		}
		return o
	}
	if present {
		o.pos = r.doc.pos(node)
		if _, isMap := mappingValues(node); !isMap {
			m.errorf(o.pos, "options must be a mapping of option names to values, not %s", describe(node))
			return o
		}
		r.doc.checkDuplicates(e.value, "options", m.job)
		o.node = r.doc.expand(e.value, m.job)
	}
	j.Options = o
	checked, err := check(j)
	if err != nil {
		var errs Errors
		if errors.As(err, &errs) {
			r.doc.add(errs...)
		} else {
			m.errorf(o.pos, "options: %v", err)
		}
		return o
	}
	o.checked = checked
	for _, of := range checked.Files {
		if of.Path != "" {
			o.files = append(o.files, NamedFile{Key: "options." + of.Key, Job: j.Name, Path: of.Path, Holds: of.Holds,
				Pos: r.doc.entryValuePos(o.node, of.Key, o.pos)})
		}
	}
	return o
}

// jobTypes is the Types given to Parse as the jobs reader asks it: a nil Types
// knows no type.
type jobTypes struct{ t Types }

func (ts jobTypes) known(typ string) bool {
	if ts.t == nil {
		return false
	}
	_, ok := ts.t.Options(typ)
	return ok
}

// names lists the known types for a message, sorted.
func (ts jobTypes) names() string {
	if ts.t == nil {
		return "(none registered)"
	}
	names := slices.Clone(ts.t.Names())
	if len(names) == 0 {
		return "(none registered)"
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// defaults are the job type's defaults (none for an unknown type).
func (ts jobTypes) defaults(typ string) Defaults {
	if d, ok := ts.t.(TypeDefaults); ok && ts.known(typ) {
		return d.Defaults(typ)
	}
	return Defaults{}
}

// options is how a known type reads its options (nil: it takes none).
func (ts jobTypes) options(typ string) OptionsType {
	read, _ := ts.t.Options(typ)
	return read
}
