package controls

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/fencing"
)

// ErrContinuous refuses a manual run of a continuous job: it always runs
// while it is led, there is no "once more".
var ErrContinuous = errors.New("it is continuous: it runs all the time its leader holds its term, there is no extra run to make")

// PausedError refuses a manual run of a paused job: no instance would run it.
type PausedError struct{ Pause Pause }

func (e *PausedError) Error() string {
	s := fmt.Sprintf("%s is paused (by %s since %s", e.Pause.Job, e.Pause.By, e.Pause.Since.UTC().Format(time.RFC3339))
	if e.Pause.Reason != "" {
		s += ": " + e.Pause.Reason
	}
	return s + "): no instance runs it until it is resumed (snip-jobs resume " + e.Pause.Job + ")"
}

// ManualRun is a manual run request as recorded, with its outcome.
type ManualRun struct {
	Request
	Attempts int   `json:"attempts"`
	RunID    int64 `json:"run_id,omitempty"` // its execution's row in job_runs
	// Started and Finished are its execution's, as job_runs records them
	// (snip-jobs history shows the same) once it has one; before, when it
	// was claimed and closed.
	Started  time.Time `json:"started,omitzero"`
	Finished time.Time `json:"finished,omitzero"`
	Result   string    `json:"result,omitempty"` // ok, error, panic, stale, cancelled, cut off
	Error    string    `json:"error,omitempty"`
	// Reports are each instance's run of a job that runs everywhere.
	Reports []Report `json:"reports,omitempty"`
	// RunEnded: job_runs has recorded its execution's end (written just
	// after the request closes), and Started and Finished are its.
	RunEnded bool `json:"-"`
}

// Recorded reports whether every execution of a request that is over has
// its end in job_runs: its times are then the ones history shows.
func (m ManualRun) Recorded() bool {
	if m.RunID != 0 && !m.RunEnded {
		return false
	}
	for _, r := range m.Reports {
		if r.RunID != 0 && !r.RunEnded {
			return false
		}
	}
	return true
}

// Closed reports whether the request is over (done or failed).
func (m ManualRun) Closed() bool { return m.State == StateDone || m.State == StateFailed }

// Report is one instance's run of a request of a job that runs everywhere.
type Report struct {
	Instance string    `json:"instance"`
	RunID    int64     `json:"run_id,omitempty"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished,omitzero"`
	Result   string    `json:"result,omitempty"`
	Error    string    `json:"error,omitempty"`
	RunEnded bool      `json:"-"` // as ManualRun's
}

// sqlInstancesUp lists the instances whose controls feed is connected to
// this database: the instances up, as the database sees them.
const sqlInstancesUp = `SELECT coalesce(array_agg(DISTINCT substr(application_name, length('snip-jobs controls ') + 1)
		ORDER BY substr(application_name, length('snip-jobs controls ') + 1)), '{}')
	FROM pg_stat_activity WHERE datname = current_database() AND application_name LIKE 'snip-jobs controls %'`

// InstancesUp lists the instances whose controls feed is connected to the
// database: the instances up, as the database sees them.
func InstancesUp(ctx context.Context, q Querier) ([]string, error) {
	var up []string
	if err := q.QueryRow(ctx, sqlInstancesUp).Scan(&up); err != nil {
		return nil, fmt.Errorf("read the instances up: %w", err)
	}
	return up, nil
}

// RequestRun asks for one extra execution of spec's job now, on behalf of by.
// While a request of the job is open (pending or running), it is joined
// (joined true) instead of a second one made. A continuous job is refused
// (ErrContinuous), as is a paused one (*PausedError). A request of a job that
// runs everywhere expects the instances up now (InstancesUp). A by longer
// than MaxBy is a *TextTooLongError.
func RequestRun(ctx context.Context, pool *pgxpool.Pool, spec configs.Job, by string) (m ManualRun, joined bool, err error) {
	if spec.Schedule.Kind == configs.Continuous {
		return m, false, fmt.Errorf("run %s: %w", spec.Name, ErrContinuous)
	}
	mode := spec.Mode().String()
	for attempt := 0; attempt < 5; attempt++ {
		var id int64
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var p Pause
			err := tx.QueryRow(ctx, `SELECT job, paused_by, paused_at, reason FROM job_pauses WHERE job = $1`, spec.Name).
				Scan(&p.Job, &p.By, &p.Since, &p.Reason)
			switch {
			case err == nil:
				return &PausedError{Pause: p}
			case !errors.Is(err, pgx.ErrNoRows):
				return err
			}
			expected := []string{}
			if spec.Mode() == configs.ModeEverywhere {
				if _, err := tx.Exec(ctx, sqlCloseReported+` AND m.job = $1`, spec.Name); err != nil {
					return err
				}
				if expected, err = InstancesUp(ctx, tx); err != nil {
					return err
				}
			}
			err = tx.QueryRow(ctx, `INSERT INTO manual_runs (job, mode, requested_by, expected) VALUES ($1, $2, $3, $4)
				ON CONFLICT (job) WHERE state IN ('pending', 'running') DO NOTHING RETURNING id`, spec.Name, mode, by, expected).Scan(&id)
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				joined = true
				err = tx.QueryRow(ctx, `SELECT id FROM manual_runs WHERE job = $1 AND state IN ('pending', 'running')`, spec.Name).Scan(&id)
			default:
				joined = false
			}
			return err
		})
		switch {
		case errors.Is(err, pgx.ErrNoRows): // the open request closed meanwhile: ask again
			continue
		case err != nil:
			return m, false, fmt.Errorf("run %s: %w", spec.Name, tooLong(err))
		}
		m, err = ReadRun(ctx, pool, id)
		return m, joined, err
	}
	return m, false, fmt.Errorf("run %s: its open requests kept closing while this one tried to join them", spec.Name)
}

// ReadRun reads manual run request id with its outcome (and the reports of
// a job that runs everywhere).
func ReadRun(ctx context.Context, q Querier, id int64) (ManualRun, error) {
	var m ManualRun
	var started, finished *time.Time
	var runID *int64
	err := q.QueryRow(ctx, `SELECT m.id, m.job, m.mode, m.requested_by, m.requested_at, m.state, coalesce(m.instance, ''),
			coalesce(m.token, 0), m.expected, m.attempts, m.run_id,
			CASE WHEN r.finished_at IS NULL THEN m.started_at ELSE r.started_at END,
			CASE WHEN r.finished_at IS NULL THEN m.finished_at ELSE r.finished_at END,
			coalesce(m.result, ''), coalesce(m.error, ''), r.finished_at IS NOT NULL
		FROM manual_runs m LEFT JOIN job_runs r ON r.id = m.run_id WHERE m.id = $1`, id).Scan(&m.ID, &m.Job, &m.Mode, &m.RequestedBy, &m.RequestedAt, &m.State,
		&m.Instance, &m.Token, &m.Expected, &m.Attempts, &runID, &started, &finished, &m.Result, &m.Error, &m.RunEnded)
	if err != nil {
		return m, fmt.Errorf("read manual run %d: %w", id, err)
	}
	m.RunID, m.Started, m.Finished = deref(runID), deref(started), deref(finished)
	rows, err := q.Query(ctx, `SELECT p.instance, coalesce(p.run_id, 0),
			CASE WHEN r.finished_at IS NULL THEN p.started_at ELSE r.started_at END,
			coalesce(CASE WHEN r.finished_at IS NULL THEN p.finished_at ELSE r.finished_at END, 'epoch'),
			coalesce(p.result, ''), coalesce(p.error, ''), r.finished_at IS NOT NULL
		FROM manual_run_reports p LEFT JOIN job_runs r ON r.id = p.run_id WHERE p.request = $1 ORDER BY p.instance`, id)
	if err != nil {
		return m, fmt.Errorf("read manual run %d's reports: %w", id, err)
	}
	var r Report
	if _, err := pgx.ForEachRow(rows, []any{&r.Instance, &r.RunID, &r.Started, &r.Finished, &r.Result, &r.Error, &r.RunEnded}, func() error {
		if r.Finished.Unix() == 0 {
			r.Finished = time.Time{}
		}
		m.Reports = append(m.Reports, r)
		m.Reported = append(m.Reported, r.Instance)
		return nil
	}); err != nil {
		return m, fmt.Errorf("read manual run %d's reports: %w", id, err)
	}
	return m, nil
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// ClaimLeader claims request id of job for the leader's term (token), in a
// transaction fenced by it on the job's resource: a pending request, or a
// running one claimed with an older term's token (that leader is gone, or
// will be refused). ok is false when there is nothing to claim.
func ClaimLeader(ctx context.Context, fence *fencing.Fence, job string, id int64, instance string, token int64) (ok bool, err error) {
	err = fence.Do(ctx, job, token, func(ctx context.Context, tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE manual_runs SET state = 'running', instance = $3, token = $4, attempts = attempts + 1,
				started_at = now(), finished_at = NULL, result = NULL, error = NULL, claim_until = NULL
			WHERE id = $1 AND job = $2 AND mode = 'leader' AND (state = 'pending' OR (state = 'running' AND token < $4))`,
			id, job, instance, token)
		ok = tag.RowsAffected() == 1
		return err
	})
	return ok, err
}

// ClaimDatabase claims request id of a database-mode job for ttl, with a new
// token from cron_claim_tokens: a pending request, or a running one whose
// claim has run out. ok is false when there is nothing to claim.
func ClaimDatabase(ctx context.Context, pool *pgxpool.Pool, id int64, instance string, ttl time.Duration) (token int64, ok bool, err error) {
	err = pool.QueryRow(ctx, `UPDATE manual_runs SET state = 'running', instance = $2, token = nextval('cron_claim_tokens'),
			claim_until = now() + make_interval(secs => $3), attempts = attempts + 1,
			started_at = now(), finished_at = NULL, result = NULL, error = NULL
		WHERE id = $1 AND mode = 'database' AND (state = 'pending' OR (state = 'running' AND claim_until < now()))
		  AND NOT EXISTS (SELECT FROM job_pauses p WHERE p.job = manual_runs.job)
		  AND NOT EXISTS (SELECT FROM instance_drains WHERE instance = $2)
		RETURNING token`, id, instance, ttl.Seconds()).Scan(&token)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("claim manual run %d: %w", id, err)
	}
	return token, true, nil
}

// Extend extends a database-mode claim by ttl while its run goes on. It
// returns the request's state while the claim is still this token's (done or
// failed once its job completed it), "" once another instance claimed it.
func Extend(ctx context.Context, pool *pgxpool.Pool, id, token int64, ttl time.Duration) (state string, err error) {
	err = pool.QueryRow(ctx, `UPDATE manual_runs
		SET claim_until = CASE WHEN state = 'running' THEN now() + make_interval(secs => $3) ELSE claim_until END
		WHERE id = $1 AND token = $2 RETURNING state`, id, token, ttl.Seconds()).Scan(&state)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return state, err
}

// Release lets another instance take a database-mode claim this one
// stopped running (shutdown, pause, drain) at once.
func Release(ctx context.Context, pool *pgxpool.Pool, id, token int64) error {
	_, err := pool.Exec(ctx, `UPDATE manual_runs SET claim_until = now() WHERE id = $1 AND token = $2 AND state = 'running'`, id, token)
	return err
}

// ManualResource is the fencing resource of a database-mode manual run of
// job: each request is fenced on its own, as each cron slot is.
func ManualResource(job string, id int64) string {
	return fmt.Sprintf("%s@manual-%d", job, id)
}

// Finish records the outcome of a singleton's request (state done or
// failed) claimed with token, in a transaction fenced by it on resource, if
// the request is still claimed so. A request its job completed in its own
// transaction (Complete) is left as it is.
func Finish(ctx context.Context, fence *fencing.Fence, resource string, id, token, runID int64, state, result, msg string) error {
	return fence.Do(ctx, resource, token, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE manual_runs SET state = $3, result = $4, error = nullif($5, ''), finished_at = now(),
				run_id = nullif($6, 0::bigint), claim_until = NULL
			WHERE id = $1 AND token = $2 AND state = 'running'`, id, token, state, result, msg, runID)
		return err
	})
}

// Complete marks request id done inside the caller's transaction (the job's
// own, fenced by token), if it is still claimed with token: the job's
// effects and the request's completion then commit together, once.
func Complete(ctx context.Context, tx pgx.Tx, id, token, runID int64) error {
	tag, err := tx.Exec(ctx, `UPDATE manual_runs SET state = 'done', result = 'ok', error = NULL, finished_at = now(),
			run_id = nullif($3, 0::bigint), claim_until = NULL
		WHERE id = $1 AND token = $2 AND state = 'running'`, id, token, runID)
	if err != nil {
		return fmt.Errorf("complete manual run %d: %w", id, err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("complete manual run %d: it is no longer claimed with token %d", id, token)
	}
	return nil
}

// sqlCloseReported closes the open requests of jobs that run everywhere that
// every expected instance still up has reported (at least one has): failed
// if one run failed, else done.
const sqlCloseReported = `UPDATE manual_runs m SET finished_at = now(),
		state = CASE WHEN EXISTS (SELECT FROM manual_run_reports r WHERE r.request = m.id AND r.result <> 'ok') THEN 'failed' ELSE 'done' END,
		result = CASE WHEN EXISTS (SELECT FROM manual_run_reports r WHERE r.request = m.id AND r.result <> 'ok') THEN 'error' ELSE 'ok' END
	WHERE m.mode = 'everywhere' AND m.state IN ('pending', 'running')
	  AND EXISTS (SELECT FROM manual_run_reports r WHERE r.request = m.id AND r.finished_at IS NOT NULL)
	  AND NOT EXISTS (SELECT FROM unnest(m.expected) AS e(instance)
		WHERE NOT EXISTS (SELECT FROM manual_run_reports r WHERE r.request = m.id AND r.instance = e.instance AND r.finished_at IS NOT NULL)
		  AND EXISTS (SELECT FROM pg_stat_activity a WHERE a.datname = current_database() AND a.application_name = 'snip-jobs controls ' || e.instance))`

// CloseReported closes request id of a job that runs everywhere once every
// expected instance still up has reported; closed says whether it is over.
func CloseReported(ctx context.Context, q Querier, id int64) (closed bool, err error) {
	if _, err := q.Exec(ctx, sqlCloseReported+` AND m.id = $1`, id); err != nil {
		return false, fmt.Errorf("close manual run %d: %w", id, err)
	}
	var state string
	if err := q.QueryRow(ctx, `SELECT state FROM manual_runs WHERE id = $1`, id).Scan(&state); err != nil {
		return false, fmt.Errorf("close manual run %d: %w", id, err)
	}
	return state == StateDone || state == StateFailed, nil
}

// StartReport records that instance runs request id of a job that runs
// everywhere; ok is false when it has already (it runs a request once).
func StartReport(ctx context.Context, pool *pgxpool.Pool, id int64, instance string) (ok bool, err error) {
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO manual_run_reports (request, instance)
			SELECT id, $2 FROM manual_runs WHERE id = $1 AND state IN ('pending', 'running') ON CONFLICT DO NOTHING`, id, instance)
		if ok = err == nil && tag.RowsAffected() == 1; !ok {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE manual_runs SET state = 'running', started_at = coalesce(started_at, now()) WHERE id = $1 AND state = 'pending'`, id)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("start manual run %d on %s: %w", id, instance, err)
	}
	return ok, nil
}

// FinishReport records instance's outcome of request id of a job that runs
// everywhere, and closes the request if every expected instance still up
// has reported. Reporters of one request finish one at a time (the request's
// row is locked first), so that the last one sees every other's report.
func FinishReport(ctx context.Context, pool *pgxpool.Pool, id int64, instance string, runID int64, result, msg string) error {
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT FROM manual_runs WHERE id = $1 FOR UPDATE`, id); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE manual_run_reports SET finished_at = now(), result = $3, error = nullif($4, ''), run_id = nullif($5, 0::bigint)
			WHERE request = $1 AND instance = $2`, id, instance, result, msg, runID); err != nil {
			return err
		}
		_, err := CloseReported(ctx, tx, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("finish manual run %d on %s: %w", id, instance, err)
	}
	return nil
}
