package leadership

import (
	"errors"
	"fmt"
)

// Reason says why a term (or a lease, and with it every term on it) ended.
type Reason string

const (
	// ReasonExpired: the deadline passed without a renewal: renewals failed or
	// went unanswered (partition, a store without quorum, a long pause of this process).
	ReasonExpired Reason = "expired"
	// ReasonLeaseLost: the store answered that the lease no longer exists, or
	// that someone else holds it.
	ReasonLeaseLost Reason = "lease-lost"
	// ReasonKeyLost: the store's record of the term was deleted or replaced by
	// someone else (an operator, or a successor after the lease ended).
	ReasonKeyLost Reason = "key-lost"
	// ReasonResigned: Term.Resign was called.
	ReasonResigned Reason = "resigned"
	// ReasonShutdown: Session.Close was called.
	ReasonShutdown Reason = "shutdown"
	// ReasonTakenOver: another instance ended the term in the store
	// (Cluster.TakeOver) without waiting for its lease to end, trusting the
	// fence to refuse what the term still writes. The lease and the
	// session's other terms live on.
	ReasonTakenOver Reason = "taken-over"
)

// Reasons lists every Reason, for metrics that want a series per reason.
var Reasons = []Reason{ReasonExpired, ReasonLeaseLost, ReasonKeyLost, ReasonResigned, ReasonShutdown, ReasonTakenOver}

// EndedError is the cause of a term's (or lease's) context once it has ended.
type EndedError struct {
	Reason Reason
	Detail string
}

func (e *EndedError) Error() string {
	if e.Detail == "" {
		return "leadership ended: " + string(e.Reason)
	}
	return "leadership ended: " + string(e.Reason) + ": " + e.Detail
}

// Ended is an *EndedError with a formatted detail.
func Ended(r Reason, format string, args ...any) *EndedError {
	return &EndedError{Reason: r, Detail: fmt.Sprintf(format, args...)}
}

// ReasonOf returns the Reason carried by err, or "" if err is not an EndedError.
func ReasonOf(err error) Reason {
	var e *EndedError
	if errors.As(err, &e) {
		return e.Reason
	}
	return ""
}
