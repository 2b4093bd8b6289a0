package chaos

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// manualDB writes, as the instances do, the records of manual runs of the
// weekly report and the renewer: requests, claims, runs, and the
// transactions that record their effects and complete them.
type manualDB struct {
	t    *testing.T
	conn *pgx.Conn
}

func (d manualDB) value(sql string, args ...any) int64 {
	d.t.Helper()
	var id int64
	if err := d.conn.QueryRow(context.Background(), sql, args...).Scan(&id); err != nil {
		d.t.Fatalf("%s: %v", sql, err)
	}
	return id
}

// request makes a request of job and has token's term claim it.
func (d manualDB) request(job string, token int64) int64 {
	id := d.value(`INSERT INTO manual_runs (job, mode, requested_by) VALUES ($1, 'leader', 'op') RETURNING id`, job)
	d.claim(id, token)
	return id
}

func (d manualDB) claim(id, token int64) {
	run(d.t, d.conn, `UPDATE manual_runs SET state = 'running', token = $2, instance = 'server-' || $2::bigint, attempts = attempts + 1,
		started_at = now() WHERE id = $1`, id, token)
}

// start records a run of job by token's term; end records its result.
func (d manualDB) start(job string, token int64, trigger string) int64 {
	return d.value(`INSERT INTO job_runs (job, instance, token, trigger) VALUES ($1, 'server-' || $2::bigint, $2, $3) RETURNING id`, job, token, trigger)
}

func (d manualDB) end(run int64, result string) {
	d.t.Helper()
	if _, err := d.conn.Exec(context.Background(), `UPDATE job_runs SET finished_at = now(), result = $2 WHERE id = $1`, run, result); err != nil {
		d.t.Fatal(err)
	}
}

// tx runs the statements in one transaction; complete adds request id's
// completion by its claimer (0: none).
func (d manualDB) tx(complete int64, stmts ...string) {
	d.t.Helper()
	tx := begin(d.t, d.conn)
	for _, s := range stmts {
		run(d.t, tx, s)
	}
	if complete != 0 {
		run(d.t, tx, `UPDATE manual_runs SET state = 'done', result = 'ok', finished_at = now() WHERE id = $1`, complete)
	}
	commit(d.t, tx)
}

func storeWeek(week string, token int) string {
	return `INSERT INTO weekly_reports (week, job, time_zone, week_start, week_end, body, body_text, body_csv, token, instance)
		VALUES ('` + week + `', 'weekly-report', 'UTC', now(), now() + interval '7 days', '{}', '', '', ` + strconv.Itoa(token) + `, 'server-` + strconv.Itoa(token) + `')`
}

func passEnds(token int) string {
	return `UPDATE certrenew_terms SET state = 'idle' WHERE job = 'cert-renewer' AND token = ` + strconv.Itoa(token)
}

// Each manual run of the weekly report and the renewer takes effect once,
// in the transaction that completes its request. A request run to
// completion by two terms (the first recorded ok, then its successor's)
// is reported; so is a report stored by a manual run in a transaction other
// than the one that completed the request, and a pass recorded ok that
// ended in a transaction that completed nothing. A report stored by a cron
// slot during a manual run, a failed pass that ended without completing,
// and a request whose claimer died before its effect (its successor ran it)
// are not.
func TestAManualRunOfTheReportOrTheRenewerThatTakesEffectTwiceIsAViolation(t *testing.T) {
	pool, connect := writeLogDB(t)
	d := manualDB{t: t, conn: connect("snip-jobs run server-5")}
	run(t, pool, `INSERT INTO certrenew_terms (job, token, instance, state) VALUES ('cert-renewer', 7, 'server-7', 'running'), ('cert-renewer', 8, 'server-8', 'running')`)

	// The weekly report, as it should: a report stored with the completion;
	// a slot's report stored while the term ran it is the slot's.
	ok := d.request(JobReport, 5)
	r := d.start(JobReport, 5, "manual")
	d.tx(ok, storeWeek("2026-W01", 5))
	d.end(r, "ok")
	d.tx(0, storeWeek("2026-W02", 5), `INSERT INTO cron_slots (job, slot, state, token, instance) VALUES ('weekly-report', now(), 'done', 5, 'server-5')`)
	// Run to completion twice: recorded ok, then taken over and run again.
	twice := d.request(JobReport, 5)
	d.end(d.start(JobReport, 5, "manual"), "ok")
	d.claim(twice, 6)
	r = d.start(JobReport, 6, "manual")
	d.tx(twice)
	d.end(r, "ok")
	// Its claimer died before its effect: its successor ran it once.
	died := d.request(JobReport, 6)
	d.start(JobReport, 6, "manual")
	d.claim(died, 9)
	r = d.start(JobReport, 9, "manual")
	d.tx(died)
	d.end(r, "ok")
	// Stored in one transaction, completed in another.
	apart := d.request(JobReport, 9)
	r = d.start(JobReport, 9, "manual")
	d.tx(0, storeWeek("2026-W03", 9))
	d.end(r, "ok")
	d.tx(apart)

	// The renewer: a pass ended with the completion; a failed pass ended
	// without; a pass recorded ok that ended without completing.
	pass := d.request(JobCerts, 7)
	r = d.start(JobCerts, 7, "manual")
	d.tx(pass, passEnds(7))
	d.end(r, "ok")
	d.end(d.start(JobCerts, 7, "schedule"), "ok") // the schedule's pass after it
	d.tx(0, passEnds(7))
	failed := d.request(JobCerts, 7)
	r = d.start(JobCerts, 7, "manual")
	d.tx(0, passEnds(7))
	d.end(r, "error")
	run(t, d.conn, `UPDATE manual_runs SET state = 'failed', result = 'error', finished_at = now() WHERE id = $1`, failed)
	renewApart := d.request(JobCerts, 8)
	r = d.start(JobCerts, 8, "manual")
	d.tx(0, passEnds(8))
	d.end(r, "ok")
	d.tx(renewApart)

	out, s := checkControlsOf(t, pool, 40*time.Millisecond)
	got := detailsOf(t, out, InvManualEffect)
	wantDetails(t, got,
		"manual run 2 of weekly-report took effect 2 times: run 2 by server-5 (token 5, recorded ok); run 3 by server-6 (token 6, recorded ok)",
		"manual run 4 of weekly-report: run 6 by server-9 (token 9, recorded ok; stored a week's report in transaction",
		"manual run 7 of cert-renewer: run 10 by server-8 (token 8, recorded ok; ended its pass in transaction")
	want := []ManualJobStats{
		{Job: JobReport, Requests: 4, Runs: 6, Executed: 4, Effects: 2, WithCompletion: 1},
		{Job: JobCerts, Requests: 3, Runs: 3, Executed: 2, Effects: 3, WithCompletion: 1},
	}
	if len(s.Manual) != 2 || s.Manual[0] != want[0] || s.Manual[1] != want[1] {
		t.Errorf("stats %+v, want %+v", s.Manual, want)
	}
}
