package controls

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"
)

// Caps on what operators write into the controls, in characters (as
// PostgreSQL's char_length counts them). Every instance reads the controls
// at each notification and every renew interval, and every status page
// shows them on each refresh, so their size is paid again and again.
// Migration 0015 holds the same caps as constraints, whoever writes.
const (
	// MaxReason bounds a reason (pause --reason, drain --reason): a
	// sentence or two and a ticket's link.
	MaxReason = 500
	// MaxBy bounds who asks (--by; by default user@host, which Linux keeps
	// under 32 + 1 + 64 characters).
	MaxBy = 200
)

// TextTooLongError is an operator's text longer than its cap: found by
// CheckText, or refused by the database's constraint (Len is then 0: the
// database does not say).
type TextTooLongError struct {
	What string // "the reason (--reason)", "who asks (--by)"
	Max  int
	Len  int
}

func (e *TextTooLongError) Error() string {
	if e.Len == 0 {
		return fmt.Sprintf("%s is longer than %d characters, the most the database accepts", e.What, e.Max)
	}
	return fmt.Sprintf("%s is %d characters long; it may be at most %d", e.What, e.Len, e.Max)
}

// CheckText refuses a reason longer than MaxReason and a by longer than
// MaxBy, as the database would.
func CheckText(by, reason string) error {
	if n := utf8.RuneCountInString(reason); n > MaxReason {
		return &TextTooLongError{What: "the reason (--reason)", Max: MaxReason, Len: n}
	}
	if n := utf8.RuneCountInString(by); n > MaxBy {
		return &TextTooLongError{What: "who asks (--by)", Max: MaxBy, Len: n}
	}
	return nil
}

// textCaps are migration 0015's constraints, by name.
var textCaps = map[string]*TextTooLongError{
	"job_pauses_reason_length":          {What: "the reason (--reason)", Max: MaxReason},
	"instance_drains_reason_length":     {What: "the reason (--reason)", Max: MaxReason},
	"job_pauses_paused_by_length":       {What: "who asks (--by)", Max: MaxBy},
	"instance_drains_drained_by_length": {What: "who asks (--by)", Max: MaxBy},
	"manual_runs_requested_by_length":   {What: "who asks (--by)", Max: MaxBy},
}

// tooLong is err as a *TextTooLongError when it is the database refusing
// text by one of textCaps, else err.
func tooLong(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23514" { // check_violation
		if c, ok := textCaps[pe.ConstraintName]; ok {
			e := *c
			return &e
		}
	}
	return err
}
