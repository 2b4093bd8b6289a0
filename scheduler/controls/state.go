package controls

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Channel is the PostgreSQL notification channel of every change to the
// controls (the payload names the table).
const Channel = "snip_jobs_controls"

// Pause is a paused job: who paused it, when (the database's clock) and why.
type Pause struct {
	Job    string    `json:"job"`
	By     string    `json:"by"`
	Since  time.Time `json:"since"`
	Reason string    `json:"reason,omitempty"`
}

// Drain is a drained instance: who drained it, when and why.
type Drain struct {
	Instance string    `json:"instance"`
	By       string    `json:"by"`
	Since    time.Time `json:"since"`
	Reason   string    `json:"reason,omitempty"`
}

// The states of a manual run request.
const (
	StatePending = "pending"
	StateRunning = "running"
	StateDone    = "done"
	StateFailed  = "failed"
)

// Request is an open manual run request (pending or running), as the
// instances see it.
type Request struct {
	ID          int64     `json:"id"`
	Job         string    `json:"job"`
	Mode        string    `json:"mode"` // leader, database or everywhere
	RequestedBy string    `json:"requested_by"`
	RequestedAt time.Time `json:"requested_at"`
	State       string    `json:"state"`
	// Instance and Token are the claim of a singleton's request (running).
	Instance string `json:"instance,omitempty"`
	Token    int64  `json:"token,omitempty"`
	// ClaimExpired: a database-mode claim whose claim_until has passed (the
	// database's clock, when read): another instance may take it over.
	ClaimExpired bool `json:"-"`
	// Expected are the instances up when the request was made, and
	// Reported those that have run it (a job that runs everywhere).
	Expected []string `json:"expected,omitempty"`
	Reported []string `json:"reported,omitempty"`
}

// State is the controls as read at one moment.
type State struct {
	Pauses map[string]Pause   // by job
	Drains map[string]Drain   // by instance
	Open   map[string]Request // the open manual run request, by job
}

// Paused returns the job's pause, if it is paused.
func (s State) Paused(job string) (Pause, bool) {
	p, ok := s.Pauses[job]
	return p, ok
}

// Drained returns the instance's drain, if it is drained.
func (s State) Drained(instance string) (Drain, bool) {
	d, ok := s.Drains[instance]
	return d, ok
}

// Querier is what Read reads through: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// The statements of Read.
const (
	sqlPauses   = `SELECT job, paused_by, paused_at, reason FROM job_pauses`
	sqlDrains   = `SELECT instance, drained_by, drained_at, reason FROM instance_drains`
	sqlOpenRuns = `SELECT m.id, m.job, m.mode, m.requested_by, m.requested_at, m.state, coalesce(m.instance, ''), coalesce(m.token, 0),
			coalesce(m.claim_until < now(), false), m.expected,
			coalesce((SELECT array_agg(r.instance ORDER BY r.instance) FROM manual_run_reports r WHERE r.request = m.id), '{}')
		FROM manual_runs m WHERE m.state IN ('pending', 'running')`
)

// Read reads the controls.
func Read(ctx context.Context, q Querier) (State, error) {
	s := State{Pauses: map[string]Pause{}, Drains: map[string]Drain{}, Open: map[string]Request{}}
	rows, err := q.Query(ctx, sqlPauses)
	if err != nil {
		return s, fmt.Errorf("read the paused jobs: %w", err)
	}
	var p Pause
	if _, err := pgx.ForEachRow(rows, []any{&p.Job, &p.By, &p.Since, &p.Reason}, func() error {
		s.Pauses[p.Job] = p
		return nil
	}); err != nil {
		return s, fmt.Errorf("read the paused jobs: %w", err)
	}
	rows, err = q.Query(ctx, sqlDrains)
	if err != nil {
		return s, fmt.Errorf("read the drained instances: %w", err)
	}
	var d Drain
	if _, err := pgx.ForEachRow(rows, []any{&d.Instance, &d.By, &d.Since, &d.Reason}, func() error {
		s.Drains[d.Instance] = d
		return nil
	}); err != nil {
		return s, fmt.Errorf("read the drained instances: %w", err)
	}
	rows, err = q.Query(ctx, sqlOpenRuns)
	if err != nil {
		return s, fmt.Errorf("read the open manual runs: %w", err)
	}
	var r Request
	if _, err := pgx.ForEachRow(rows, []any{&r.ID, &r.Job, &r.Mode, &r.RequestedBy, &r.RequestedAt, &r.State,
		&r.Instance, &r.Token, &r.ClaimExpired, &r.Expected, &r.Reported}, func() error {
		r.Expected, r.Reported = slices.Clone(r.Expected), slices.Clone(r.Reported)
		s.Open[r.Job] = r
		return nil
	}); err != nil {
		return s, fmt.Errorf("read the open manual runs: %w", err)
	}
	return s, nil
}

// Holding reads, now, whether job is paused or instance drained (nil when
// not): the check a term makes as it starts, so that a term won just after
// a pause's commit never runs the job, however late the feed's read.
func Holding(ctx context.Context, q Querier, job, instance string) (*Pause, *Drain, error) {
	var p Pause
	var d Drain
	var paused, drained bool
	err := q.QueryRow(ctx, `SELECT
			coalesce(p.paused_by, ''), coalesce(p.paused_at, 'epoch'), coalesce(p.reason, ''), p.job IS NOT NULL,
			coalesce(d.drained_by, ''), coalesce(d.drained_at, 'epoch'), coalesce(d.reason, ''), d.instance IS NOT NULL
		FROM (SELECT) AS one
		LEFT JOIN job_pauses p ON p.job = $1
		LEFT JOIN instance_drains d ON d.instance = $2`, job, instance).
		Scan(&p.By, &p.Since, &p.Reason, &paused, &d.By, &d.Since, &d.Reason, &drained)
	if err != nil {
		return nil, nil, fmt.Errorf("read whether %s is paused: %w", job, err)
	}
	var pp *Pause
	var dd *Drain
	if paused {
		p.Job = job
		pp = &p
	}
	if drained {
		d.Instance = instance
		dd = &d
	}
	return pp, dd, nil
}
