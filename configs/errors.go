package configs

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Pos is a position in a configuration file. Line and Col count from 1; zero means
// unknown.
type Pos struct {
	File      string
	Line, Col int
}

// String returns "file:line:col", leaving out the parts that are unknown.
func (p Pos) String() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		if b.Len() > 0 {
			b.WriteByte(':')
		}
		fmt.Fprintf(&b, "%d", p.Line)
		if p.Col > 0 {
			fmt.Fprintf(&b, ":%d", p.Col)
		}
	}
	return b.String()
}

func comparePos(a, b Pos) int {
	return cmp.Or(cmp.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line), cmp.Compare(a.Col, b.Col))
}

// Error is one problem in a configuration file.
type Error struct {
	Pos Pos
	// Job is the name of the job the problem is in ("" outside jobs, or when the
	// job has no name).
	Job string
	Msg string
}

// Error returns `file:line:col: job "name": message`.
func (e *Error) Error() string {
	var b strings.Builder
	if p := e.Pos.String(); p != "" {
		b.WriteString(p)
		b.WriteString(": ")
	}
	if e.Job != "" {
		fmt.Fprintf(&b, "job %q: ", e.Job)
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Errors is every problem found in a configuration file. Parse and Load return it
// sorted by position.
type Errors []*Error

// Error returns one problem per line, sorted by position.
func (es Errors) Error() string {
	sorted := slices.Clone(es)
	sortErrors(sorted)
	lines := make([]string, len(sorted))
	for i, e := range sorted {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

func sortErrors(es Errors) {
	slices.SortStableFunc(es, func(a, b *Error) int {
		return cmp.Or(comparePos(a.Pos, b.Pos), cmp.Compare(a.Job, b.Job), cmp.Compare(a.Msg, b.Msg))
	})
}

// problems collects what is wrong with a file as it is read: every reader adds
// to it and goes on, so that Parse reports everything at once instead of
// stopping at the first problem.
type problems struct {
	errs Errors // in the order found
}

func (ps *problems) errorf(pos Pos, job, format string, args ...any) {
	ps.errs = append(ps.errs, &Error{Pos: pos, Job: job, Msg: fmt.Sprintf(format, args...)})
}

func (ps *problems) add(es ...*Error) { ps.errs = append(ps.errs, es...) }

// splitErrorValues returns the errors of a joined error one by one.
func splitErrorValues(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, splitErrorValues(e)...)
		}
		return out
	}
	return []error{err}
}

// dedupe drops repeated problems (the same text at the same place), which a value
// shared through a YAML alias can produce. es must be sorted.
func dedupe(es Errors) Errors {
	return slices.CompactFunc(es, func(a, b *Error) bool { return *a == *b })
}
