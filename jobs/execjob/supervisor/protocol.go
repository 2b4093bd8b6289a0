package supervisor

import "time"

// The caller and its supervisor talk in JSON values, one a line, over two
// pipes: the control pipe (caller → supervisor, the supervisor's fd 3) and
// the report pipe (supervisor → caller, fd 4). Both ends are the same
// binary, so the format needs no versioning; the supervisor is re-executed
// from /proc/self/exe for that reason (see Spec.Binary).

// hideEnv is the supervisor's one environment variable, when Spec.Hide is
// set: the paths to hide, as a JSON array of strings. It restricts itself
// before it reports Ready, so that a spare's run does not wait for it.
const hideEnv = "SNIP_JOBS_SUPERVISOR_HIDE"

// order is the caller's first message: what to run, and until when.
type order struct {
	Path     string        `json:"path"`
	Args     []string      `json:"args,omitempty"`
	Env      []string      `json:"env,omitempty"`
	Dir      string        `json:"dir,omitempty"`
	Deadline time.Duration `json:"deadline,omitempty"`
	Grace    time.Duration `json:"grace"`
}

// command is every later message of the caller.
type command struct {
	// Seq and Deadline move the deadline; the supervisor answers with an
	// ack carrying Seq.
	Seq      uint64        `json:"seq,omitempty"`
	Deadline time.Duration `json:"deadline,omitempty"`
	// Stop ends the run now, with this grace.
	Stop *time.Duration `json:"stop,omitempty"`
}

// report is every message of the supervisor, in this order: Ready; PID or
// StartErr; then acks as they come; Exit; Gone.
type report struct {
	Ready    bool          `json:"ready,omitempty"`
	PID      int           `json:"pid,omitempty"`
	StartErr *startFailure `json:"start_error,omitempty"`
	Ack      *ack          `json:"ack,omitempty"`
	Exit     *exitStatus   `json:"exit,omitempty"`
	Gone     *gone         `json:"gone,omitempty"`
}

type startFailure struct {
	Errno   int    `json:"errno,omitempty"` // the exec's, when it has one
	Late    bool   `json:"late,omitempty"`  // the deadline left no time
	Message string `json:"message"`
}

type ack struct {
	Seq      uint64        `json:"seq"`
	Applied  bool          `json:"applied"`  // false: the run is ending and the deadline moves no later
	Deadline time.Duration `json:"deadline"` // the deadline in force after it
}

type exitStatus struct {
	Code   int `json:"code"`             // -1 when a signal ended the program
	Signal int `json:"signal,omitempty"` // the signal that did
}

type gone struct {
	Ended      Ending `json:"ended"`
	Terminated int    `json:"terminated"`
	Killed     int    `json:"killed"`
}
