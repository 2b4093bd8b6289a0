package scheduler

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/leadership"
)

// RunRecord is one run of a job, as logged in job_runs.
type RunRecord struct {
	ID       int64     `json:"id,omitempty"`
	Instance string    `json:"instance"`
	Token    int64     `json:"token"`
	Slot     time.Time `json:"slot,omitzero"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished,omitzero"`
	Result   string    `json:"result,omitempty"` // "" while running
	Error    string    `json:"error,omitempty"`
}

// SlotRecord is a cron slot as recorded in cron_slots.
type SlotRecord struct {
	Slot     time.Time `json:"slot"`
	State    string    `json:"state"`
	Token    int64     `json:"token"`
	Instance string    `json:"instance"`
	Attempts int       `json:"attempts"`
	Finished time.Time `json:"finished,omitzero"`
	Error    string    `json:"error,omitempty"`
}

// recordStart logs the start of a run in job_runs (best-effort: a database
// outage must not stop jobs that do not need it). It gives up when ctx (the
// run's) ends: a run whose term is over does nothing worth recording, and a
// slow database must not keep a job from returning within its grace period.
func (s *Scheduler) recordStart(ctx context.Context, j *job, r *Run) *RunRecord {
	rec := &RunRecord{Instance: s.instance, Token: r.Token, Slot: r.Slot, Started: time.Now()}
	if records := s.records(); records != nil {
		bctx, cancel := context.WithTimeout(ctx, recordTimeout)
		defer cancel()
		var slot *time.Time
		if !r.Slot.IsZero() {
			slot = &r.Slot
		}
		err := records.QueryRow(bctx, sqlRunStart,
			j.spec.Name, s.instance, r.Token, slot).Scan(&rec.ID)
		if err != nil {
			r.Log.Debug("cannot log the run's start", "err", err)
		}
	}
	j.mu.Lock()
	j.last = rec
	j.mu.Unlock()
	return rec
}

// The statements of the scheduler's own records.
const (
	sqlTermStart = `INSERT INTO job_terms (job, token, instance) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`
	sqlTermEnd   = `UPDATE job_terms SET ended_at = now(), reason = $3 WHERE job = $1 AND token = $2`
	sqlRunStart  = `INSERT INTO job_runs (job, instance, token, slot) VALUES ($1, $2, $3, $4) RETURNING id`
	sqlRunEnd    = `UPDATE job_runs SET finished_at = now(), result = $2, error = $3 WHERE id = $1`
	sqlRejection = `INSERT INTO fence_rejections (resource, token, current, instance) VALUES ($1, $2, $3, $4)`
)

// WarmRecords prepares on conn the statements the scheduler writes its
// records with, under their own text as name, so that pgx uses them without a
// parse. Make it the AfterConnect hook of the Records pool (Config.Records):
// a record written on a fresh connection then costs one round trip, not the
// parse of a cold backend, which took 20–90 ms under load in the
// fault-injection runs (a successor's first record, before its job starts). A
// statement that cannot be prepared (its table not migrated yet) is parsed
// when first used instead: WarmRecords never fails a connection.
func WarmRecords(ctx context.Context, conn *pgx.Conn) error {
	for _, sql := range []string{sqlTermStart, sqlTermEnd, sqlRunStart, sqlRunEnd, sqlRejection} {
		if _, err := conn.Prepare(ctx, sql, sql); err != nil && ctx.Err() != nil {
			break
		}
	}
	return nil
}

// recordTimeout bounds each write to job_runs.
const recordTimeout = 5 * time.Second

// recordFinish logs the end of a run: at once in memory (status), and in
// job_runs in the background, so that the run's caller — and the end of a term
// waiting for its job — never waits on that write (over a slow database link
// it could take longer than the job's grace). Run waits for these writes
// before it returns.
func (s *Scheduler) recordFinish(j *job, rec *RunRecord, result string, runErr error) {
	done := *rec
	done.Finished, done.Result = time.Now(), result
	if runErr != nil {
		done.Error = runErr.Error()
	}
	j.mu.Lock()
	j.last = &done
	j.mu.Unlock()
	records := s.records()
	if records == nil || rec.ID == 0 {
		return
	}
	var msg *string
	if runErr != nil {
		msg = &done.Error
	}
	s.recordWrites.Go(func() {
		bctx, cancel := context.WithTimeout(context.Background(), recordTimeout)
		defer cancel()
		if _, err := records.Exec(bctx, sqlRunEnd,
			rec.ID, result, msg); err != nil {
			j.log.Debug("cannot log the run's end", "run", rec.ID, "err", err)
		}
	})
}

// JobStatus is this instance's view of one job.
type JobStatus struct {
	Job       string        `json:"job"`
	Type      string        `json:"type"`
	Singleton bool          `json:"singleton"`
	Mode      string        `json:"mode"` // everywhere, leader, database
	Schedule  string        `json:"schedule"`
	Leading   bool          `json:"leading"`
	Token     int64         `json:"token,omitempty"`
	Since     time.Time     `json:"since,omitzero"`
	Headroom  time.Duration `json:"headroom_ns,omitempty"` // until the term's deadline
	LastRun   *RunRecord    `json:"last_run,omitempty"`
}

// Status is this instance's view of its jobs, without I/O.
func (s *Scheduler) Status() []JobStatus {
	out := make([]JobStatus, 0, len(s.jobs))
	for _, j := range s.jobs {
		st := JobStatus{
			Job: j.spec.Name, Type: j.spec.Type, Singleton: j.spec.Singleton,
			Mode: j.mode.String(), Schedule: describeSchedule(j.spec.Schedule),
		}
		j.mu.Lock()
		if t := j.term; t != nil && t.Valid() {
			st.Leading, st.Token, st.Since = true, t.Token(), t.Started()
			st.Headroom = max(0, time.Until(t.Deadline()))
		}
		if j.last != nil {
			last := *j.last
			st.LastRun = &last
		}
		j.mu.Unlock()
		out = append(out, st)
	}
	return out
}

// Leading is the number of terms this instance holds now.
func (s *Scheduler) Leading() int { return int(s.leading.Load()) }

func describeSchedule(sch configs.Schedule) string {
	switch sch.Kind {
	case configs.Continuous:
		return "continuous"
	case configs.Interval:
		if sch.Jitter > 0 {
			return fmt.Sprintf("every %v (+ up to %v)", sch.Every, sch.Jitter)
		}
		return fmt.Sprintf("every %v", sch.Every)
	case configs.Cron:
		return fmt.Sprintf("cron %q %s", sch.Cron, sch.Location)
	}
	return "?"
}

// ClusterJob is one job as the whole cluster sees it: the leader in etcd, the
// last run and the last cron slot in PostgreSQL.
type ClusterJob struct {
	JobStatus
	Leader   *leadership.Leader `json:"leader,omitempty"`
	LastSlot *SlotRecord        `json:"last_slot,omitempty"`
}

// ClusterStatus reads the cluster's state of jobs from etcd (cli may be nil:
// database mode only) and PostgreSQL (pool may be nil). It needs no running
// instance: `snip-jobs status` calls it from anywhere.
func ClusterStatus(ctx context.Context, cli *clientv3.Client, prefix string, pool *pgxpool.Pool, jobs []configs.Job) ([]ClusterJob, error) {
	leaders := map[string]leadership.Leader{}
	var errs []error
	if cli != nil {
		ls, err := leadership.Leaders(ctx, cli, prefix)
		if err != nil {
			errs = append(errs, err)
		}
		for _, l := range ls {
			leaders[l.Job] = l
		}
	}
	out := make([]ClusterJob, 0, len(jobs))
	for _, spec := range jobs {
		m := everywhere
		if spec.Singleton {
			m = leaderMode
			if spec.Schedule.Kind == configs.Cron && spec.Schedule.Coordination == configs.Database {
				m = databaseMode
			}
		}
		cj := ClusterJob{JobStatus: JobStatus{Job: spec.Name, Type: spec.Type, Singleton: spec.Singleton,
			Mode: m.String(), Schedule: describeSchedule(spec.Schedule)}}
		if l, ok := leaders[spec.Name]; ok {
			cj.Leader = &l
			cj.Leading, cj.Token, cj.Since = true, l.Token, l.Since
		}
		if pool != nil {
			if err := readLast(ctx, pool, spec.Name, &cj); err != nil {
				errs = append(errs, err)
			}
		}
		out = append(out, cj)
	}
	return out, errors.Join(errs...)
}

func readLast(ctx context.Context, pool *pgxpool.Pool, job string, cj *ClusterJob) error {
	var r RunRecord
	var slot, finished *time.Time
	var result, msg *string
	err := pool.QueryRow(ctx, `SELECT id, instance, token, slot, started_at, finished_at, result, error
		FROM job_runs WHERE job = $1 ORDER BY id DESC LIMIT 1`, job).
		Scan(&r.ID, &r.Instance, &r.Token, &slot, &r.Started, &finished, &result, &msg)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return fmt.Errorf("last run of %s: %w", job, err)
	default:
		r.Slot, r.Finished, r.Result, r.Error = deref(slot), deref(finished), deref(result), deref(msg)
		cj.LastRun = &r
	}
	var sr SlotRecord
	err = pool.QueryRow(ctx, `SELECT slot, state, token, instance, attempts, finished_at, error
		FROM cron_slots WHERE job = $1 ORDER BY slot DESC LIMIT 1`, job).
		Scan(&sr.Slot, &sr.State, &sr.Token, &sr.Instance, &sr.Attempts, &finished, &msg)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return fmt.Errorf("last slot of %s: %w", job, err)
	default:
		sr.Finished, sr.Error = deref(finished), deref(msg)
		cj.LastSlot = &sr
	}
	return nil
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// ResignKey is where an operator's request that job's leader resign is put.
func ResignKey(prefix, job string) string {
	return strings.TrimSuffix(prefix, "/") + "/resign/" + job
}

// ErrNoLeader is returned by RequestResign when the job has no leader.
var ErrNoLeader = errors.New("the job has no leader")

// RequestResign asks the current leader of job to hand over: it writes a
// request naming the leader's token, which the leader's scheduler watches, and
// waits until another term holds the job (or nobody, when no other instance is
// campaigning) or ctx ends. It returns the leader before and after.
func RequestResign(ctx context.Context, cli *clientv3.Client, prefix, job string) (before leadership.Leader, after *leadership.Leader, err error) {
	before, ok, err := leadership.Observe(ctx, cli, prefix, job)
	if err != nil {
		return before, nil, err
	}
	if !ok {
		return before, nil, fmt.Errorf("resign %s: %w", job, ErrNoLeader)
	}
	lease, err := cli.Grant(ctx, 60) // the request cleans itself up
	if err != nil {
		return before, nil, fmt.Errorf("resign %s: %w", job, err)
	}
	key := ResignKey(prefix, job)
	if _, err := cli.Put(ctx, key, strconv.FormatInt(before.Token, 10), clientv3.WithLease(lease.ID)); err != nil {
		return before, nil, fmt.Errorf("resign %s: %w", job, err)
	}
	defer cli.Revoke(context.WithoutCancel(ctx), lease.ID)
	for {
		l, ok, err := leadership.Observe(ctx, cli, prefix, job)
		switch {
		case err != nil:
			return before, nil, fmt.Errorf("resign %s: %w", job, err)
		case ok && l.Token != before.Token:
			return before, &l, nil
		}
		select {
		case <-ctx.Done():
			if !ok {
				return before, nil, nil // handed over; nobody has taken it yet
			}
			return before, nil, fmt.Errorf("resign %s: the leader (%s, token %d) did not hand over: %w", job, before.Instance, before.Token, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TermRecord is one term as recorded in job_terms (database clock). Ended is
// zero while the term runs, and stays zero for a term whose instance died:
// the next term's start bounds it. History never ends a term its instance
// handed over after its successor's start.
type TermRecord struct {
	Job      string    `json:"job"`
	Token    int64     `json:"token"`
	Instance string    `json:"instance"`
	Started  time.Time `json:"started"`
	Ended    time.Time `json:"ended,omitzero"`
	Reason   string    `json:"reason,omitempty"`
}

// Rejection is a fenced write refused because a newer term had written.
type Rejection struct {
	Resource string    `json:"resource"`
	Token    int64     `json:"token"`
	Current  int64     `json:"current"`
	Instance string    `json:"instance"`
	At       time.Time `json:"at"`
}

// History reads the terms that overlap [since, now] and the refused writes
// after since, oldest first. A term whose instance died without closing it
// ends, for this purpose, when its successor started.
//
// A term its instance handed over (resigned while it held: shutdown, an
// operator's request, the watchdog, a rebalance, a panic) ends no later than
// its successor's start: it records its end after resigning, so that write
// may land after the successor's. A later recorded end is kept for the other
// terms: an instance paused or cut off noticed late that its term had ended.
func History(ctx context.Context, pool *pgxpool.Pool, since time.Time) ([]TermRecord, []Rejection, error) {
	// A term never closed is either running (the job's newest) or was lost with
	// its instance, in which case its successor's start bounds it.
	rows, err := pool.Query(ctx, `SELECT t.job, t.token, t.instance, t.started_at,
			CASE WHEN t.reason = ANY ($2) THEN least(t.ended_at, next.started_at) ELSE t.ended_at END,
			coalesce(t.reason, '')
		FROM job_terms t,
		LATERAL (SELECT min(n.started_at) AS started_at FROM job_terms n WHERE n.job = t.job AND n.token > t.token) next
		WHERE t.ended_at >= $1
		   OR (t.ended_at IS NULL AND coalesce(next.started_at, 'infinity') >= $1)
		ORDER BY t.started_at, t.token`, since, handOverLabels)
	if err != nil {
		return nil, nil, fmt.Errorf("read term history: %w", err)
	}
	var terms []TermRecord
	var t TermRecord
	var ended *time.Time
	if _, err := pgx.ForEachRow(rows, []any{&t.Job, &t.Token, &t.Instance, &t.Started, &ended, &t.Reason}, func() error {
		t.Ended = deref(ended)
		terms = append(terms, t)
		return nil
	}); err != nil {
		return nil, nil, fmt.Errorf("read term history: %w", err)
	}
	rows, err = pool.Query(ctx, `SELECT resource, token, current, instance, at FROM fence_rejections WHERE at >= $1 ORDER BY at`, since)
	if err != nil {
		return nil, nil, fmt.Errorf("read refused writes: %w", err)
	}
	rejections, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Rejection])
	if err != nil {
		return nil, nil, fmt.Errorf("read refused writes: %w", err)
	}
	return terms, rejections, nil
}
