package chaos

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The invariants the checker verifies, as named in the report.
const (
	InvTokenOrder     = "every job's writes accepted in token order, never interleaved"
	InvTermOwner      = "each accepted token is a term etcd granted to that job, written by its holder"
	InvFenceTable     = "fencing_tokens agrees with the accepted writes"
	InvCounts         = "click counts equal the committed valid events exactly"
	InvReport         = "one weekly report (and one mail) per week, from a granted term"
	InvCerts          = "at most one current certificate per domain, stored by a granted term"
	InvQuorum         = "no term started, and no term acted past its TTL, while etcd had no quorum"
	InvPaused         = "a paused job does nothing from a renew interval after its pause until its resume"
	InvManual         = "each manual run executes once: one committed run for a done request, none for another"
	InvManualEffect   = "each manual run of the weekly report and the renewer takes effect once, in the transaction that completes it"
	InvDrained        = "a drained instance does nothing from a renew interval after its drain until its undrain"
	InvRecovery       = "the cluster recovered after every fault (every job led, the probe written)"
	InvRunInTerm      = "no run of a term is recorded as beginning after that term's end"
	InvOKOverlap      = "no two runs of a singleton recorded ok overlap"
	InvRunClosed      = "no run is left open a TTL after its term's successor began"
	InvProgramOverlap = "no two programs of the exec singleton alive at once (each start finds no process of an earlier run)"
	InvProgramLeft    = "no process of any exec program left once the instances stopped"
)

// Invariants lists them in the report's order.
var Invariants = []string{InvTokenOrder, InvTermOwner, InvFenceTable, InvCounts, InvReport, InvCerts, InvQuorum,
	InvPaused, InvManual, InvManualEffect, InvDrained, InvRunInTerm, InvOKOverlap, InvRunClosed, InvProgramOverlap, InvProgramLeft, InvRecovery}

// Violation is one broken invariant, with what shows it.
type Violation struct {
	Invariant string
	Detail    string
}

// probeRow is one accepted probe write.
type probeRow struct {
	ID        int64
	Instance  string
	Token     int64
	Seq       int64
	Committed time.Time
	Trigger   string    // what started its run ("" from a release without @trigger)
	ManualRun int64     // the manual run request its run executed (0: none)
	Began     time.Time // when its transaction began
}

// jobWrite is one logged write of a job's row (chaos_writes, see
// loggedWrites).
type jobWrite struct {
	Seq         int64 // commit order
	Job, Table  string
	Op          string    // INSERT or UPDATE
	Token       int64     // the row's token as written
	RowInstance string    // the row's instance column ("" when it has none)
	Client      string    // the writing session's application_name
	Xact        string    // the writing transaction's id
	Began       time.Time // when the writing transaction began
	Committed   time.Time
}

// writer is the instance whose session wrote w ("" if the session was not a
// snip-jobs instance's), and the token of the fenced transaction it wrote in
// (0: not in a fenced transaction, or the fence did not name it: the broken
// build).
func (w jobWrite) writer() (instance string, fenceToken int64) {
	f := strings.Fields(w.Client)
	if len(f) < 3 || f[0] != "snip-jobs" {
		return "", 0
	}
	if len(f) > 3 {
		if t, ok := strings.CutPrefix(f[len(f)-1], "fence-token="); ok {
			fenceToken, _ = strconv.ParseInt(t, 10, 64)
		}
	}
	return f[2], fenceToken
}

// facts is what the checker reads from the resources and the harness's logs.
type facts struct {
	probe      []probeRow            // in commit order
	writes     []jobWrite            // in commit order
	terms      map[termKey]termEvent // every term the observer saw granted
	jobTerms   []jobTerm
	rejections int
	ctl        *controlFacts
	asOf       time.Time // the database's clock when they were read
}

// termKey names a term: on etcd a token alone would do (etcd's revisions
// are global), on Kubernetes each job counts its own tokens from 1.
type termKey struct {
	Job   string
	Token int64
}

type jobTerm struct {
	Job      string
	Token    int64
	Instance string
	Started  time.Time
	Ended    *time.Time // its recorded end, if any
}

// checker verifies the invariants after a run.
type checker struct {
	pool  *pgxpool.Pool
	ttl   time.Duration
	renew time.Duration // the instances' renew interval
	out   []Violation
}

func (k *checker) violate(inv, format string, args ...any) {
	k.out = append(k.out, Violation{Invariant: inv, Detail: fmt.Sprintf(format, args...)})
}

func readFacts(ctx context.Context, pool *pgxpool.Pool, events []termEvent) (*facts, error) {
	f := &facts{terms: map[termKey]termEvent{}}
	for _, e := range events {
		k := termKey{e.Job, e.Token}
		if _, seen := f.terms[k]; e.Start && !seen { // the first sight: a watch's re-list sees it again later
			f.terms[k] = e
		}
	}
	rows, err := pool.Query(ctx, `SELECT id, instance, token, coalesce(commit_seq, 0), coalesce(committed_at, 'epoch'),
		coalesce(trigger, ''), coalesce(manual_run, 0), xact_start FROM chaos_probe ORDER BY commit_seq NULLS FIRST, id`)
	if err != nil {
		return nil, fmt.Errorf("read the probe: %w", err)
	}
	if f.probe, err = pgx.CollectRows(rows, pgx.RowToStructByPos[probeRow]); err != nil {
		return nil, fmt.Errorf("read the probe: %w", err)
	}
	rows, err = pool.Query(ctx, `SELECT seq, job, tbl, op, coalesce(token, 0), coalesce(row_instance, ''), client, xact::text, xact_start, committed_at
		FROM chaos_writes ORDER BY seq`)
	if err != nil {
		return nil, fmt.Errorf("read chaos_writes: %w", err)
	}
	if f.writes, err = pgx.CollectRows(rows, pgx.RowToStructByPos[jobWrite]); err != nil {
		return nil, fmt.Errorf("read chaos_writes: %w", err)
	}
	rows, err = pool.Query(ctx, `SELECT job, token, instance, started_at, ended_at FROM job_terms ORDER BY started_at`)
	if err != nil {
		return nil, fmt.Errorf("read job_terms: %w", err)
	}
	if f.jobTerms, err = pgx.CollectRows(rows, pgx.RowToStructByPos[jobTerm]); err != nil {
		return nil, fmt.Errorf("read job_terms: %w", err)
	}
	if err := pool.QueryRow(ctx, `SELECT now()`).Scan(&f.asOf); err != nil {
		return nil, fmt.Errorf("read the database's clock: %w", err)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM fence_rejections`).Scan(&f.rejections); err != nil {
		return nil, fmt.Errorf("read fence_rejections: %w", err)
	}
	if f.ctl, err = readControls(ctx, pool); err != nil {
		return nil, err
	}
	return f, nil
}

// granted reports whether the store granted job (any job, when "") a term
// with token to instance.
func (f *facts) granted(job string, token int64, instance string) bool {
	if job != "" {
		if e, ok := f.terms[termKey{job, token}]; ok {
			return e.Instance == instance
		}
	} else {
		for k, e := range f.terms {
			if k.Token == token && e.Instance == instance {
				return true
			}
		}
	}
	for _, t := range f.jobTerms { // a term the watch missed (it should not) but the instance recorded
		if t.Token == token && (job == "" || t.Job == job) && t.Instance == instance {
			return true
		}
	}
	return false
}

// write is one accepted write of a job, for the order and ownership checks.
type write struct {
	What      string // "probe row 42", "aggregator's click_rejects insert (transaction 812)"
	Tx        string // the writing transaction ("": each write its own)
	Token     int64
	Writer    string // the instance that wrote it
	Seq       int64  // commit order
	Committed time.Time
}

func (w write) String() string {
	return fmt.Sprintf("%s by %s with token %d (#%d, %s)", w.What, w.Writer, w.Token, w.Seq, w.Committed.Format("15:04:05.000"))
}

// checkWrites checks the writes of every job: the probe's rows and the
// other jobs' logged writes (loggedWrites). Per job, in commit order, tokens
// never go down: a lower token after a higher one is a stale term's write
// accepted after its successor's (so the two terms' writes interleaved). Each
// token is a term of that job that etcd granted to the instance that wrote
// it; a row that names an instance names the writer; a write in a fenced
// transaction carries the fence's token.
func (k *checker) checkWrites(f *facts) {
	var probe []write
	for _, r := range f.probe {
		if r.Seq == 0 {
			k.violate(InvTokenOrder, "probe row %d (token %d, %s) has no commit order", r.ID, r.Token, r.Instance)
			continue
		}
		probe = append(probe, write{What: fmt.Sprintf("probe row %d", r.ID), Token: r.Token, Writer: r.Instance, Seq: r.Seq, Committed: r.Committed})
	}
	k.checkOrder(f, JobProbe, probe)

	byJob := map[string][]write{}
	for _, w := range f.writes {
		writer, fenced := w.writer()
		what := fmt.Sprintf("%s's %s %s (transaction %s)", w.Job, w.Table, strings.ToLower(w.Op), w.Xact)
		switch {
		case writer == "":
			k.violate(InvTermOwner, "%s with token %d (#%d) was written by a session of no snip-jobs instance (application_name %q)", what, w.Token, w.Seq, w.Client)
			continue
		case w.RowInstance != "" && w.RowInstance != writer:
			k.violate(InvTermOwner, "%s with token %d (#%d) names %s but was written by %s", what, w.Token, w.Seq, w.RowInstance, writer)
		case fenced != 0 && fenced != w.Token:
			k.violate(InvTermOwner, "%s by %s carries token %d but was written in a transaction fenced with token %d", what, writer, w.Token, fenced)
		}
		byJob[w.Job] = append(byJob[w.Job], write{What: what, Tx: w.Xact, Token: w.Token, Writer: writer, Seq: w.Seq, Committed: w.Committed})
	}
	for _, job := range slices.Sorted(maps.Keys(byJob)) {
		k.checkOrder(f, job, byJob[job])
	}
}

// checkOrder checks one job's writes, in commit order: tokens never go down
// (one violation per transaction), and each (token, writer) is a term of the
// job granted to the writer (one violation per pair).
func (k *checker) checkOrder(f *facts, job string, ws []write) {
	var last write
	late := map[string]bool{}
	type owner struct {
		token  int64
		writer string
	}
	owners := map[owner]bool{}
	for _, w := range ws {
		if w.Token < last.Token {
			key := w.Tx
			if key == "" {
				key = w.What
			}
			if !late[key] {
				late[key] = true
				k.violate(InvTokenOrder, "%s committed after %s", w, last)
			}
		}
		if o := (owner{w.Token, w.Writer}); !owners[o] {
			owners[o] = true
			if !f.granted(job, w.Token, w.Writer) {
				k.violate(InvTermOwner, "%s: token %d written by %s, which etcd never granted it a term of %s with", w.What, w.Token, w.Writer, job)
			}
		}
		if w.Token >= last.Token {
			last = w
		}
	}
}

// checkFenceTable: every stored token is a term granted to the stored holder,
// and the probe's row holds the highest token among its accepted writes.
func (k *checker) checkFenceTable(ctx context.Context, f *facts) error {
	rows, err := k.pool.Query(ctx, `SELECT resource, token, holder FROM fencing_tokens`)
	if err != nil {
		return fmt.Errorf("read fencing_tokens: %w", err)
	}
	type ft struct {
		Resource string
		Token    int64
		Holder   string
	}
	fts, err := pgx.CollectRows(rows, pgx.RowToStructByPos[ft])
	if err != nil {
		return err
	}
	var maxProbe int64
	for _, r := range f.probe {
		maxProbe = max(maxProbe, r.Token)
	}
	sawProbe := false
	for _, r := range fts {
		if !f.granted("", r.Token, r.Holder) {
			k.violate(InvFenceTable, "fencing_tokens[%s] = %d (holder %s): not a term etcd granted to %s", r.Resource, r.Token, r.Holder, r.Holder)
		}
		if r.Resource == JobProbe {
			sawProbe = true
			if r.Token != maxProbe {
				k.violate(InvFenceTable, "fencing_tokens[probe] = %d, but the highest accepted probe token is %d", r.Token, maxProbe)
			}
		}
	}
	if !sawProbe && maxProbe > 0 {
		k.violate(InvFenceTable, "fencing_tokens has no row for the probe, which accepted writes up to token %d", maxProbe)
	}
	return nil
}

// checkQuorum: while only one etcd member ran, no term was recorded as started
// (job_terms, 1 s allowed for the best-effort record of a term won just
// before), no term existed that was not granted before the loss
// (grantedBefore), and no probe write was accepted later than TTL after etcd
// stopped renewing leases: from the loss for a quorum loss (every term's
// deadline is before that), from the isolated leader's step-down for a loss
// of both followers (it may renew until then).
func (k *checker) checkQuorum(f *facts, faults []*Fault) {
	for _, q := range faults {
		if (q.Kind != QuorumLoss && q.Kind != FollowersLoss) || q.LossStart.IsZero() {
			continue
		}
		end := q.LossEnd
		renewing := q.LossStart // until when etcd may have renewed a lease
		if q.Kind == FollowersLoss {
			renewing = q.StepDown
			if renewing.IsZero() {
				renewing = q.RestartAt
			}
		}
		for _, t := range f.jobTerms {
			if t.Started.After(q.LossStart.Add(time.Second)) && t.Started.Before(q.RestartAt) {
				k.violate(InvQuorum, "fault %d: %s started a term of %s (token %d) at %s, while etcd had one member of three",
					q.N, t.Instance, t.Job, t.Token, t.Started.Format("15:04:05.000"))
			}
			if !q.grantedBefore(f, t.Job, t.Token) && t.Started.Before(q.RestartAt) && t.Started.After(q.LossStart) {
				k.violate(InvQuorum, "fault %d: term %d of %s was not granted before the quorum loss (newest before it: %d; no grant of it seen until the members were back)",
					q.N, t.Token, t.Job, q.preLoss(t.Job))
			}
		}
		for _, r := range f.probe {
			if r.Committed.After(renewing.Add(k.ttl)) && r.Committed.Before(q.RestartAt) {
				k.violate(InvQuorum, "fault %d (%s): probe write by %s (token %d) accepted at %s, %v after etcd last could renew a lease (TTL %v)",
					q.N, q.Kind, r.Instance, r.Token, r.Committed.Format("15:04:05.000"), r.Committed.Sub(renewing).Round(time.Millisecond), k.ttl)
			}
			if r.Committed.After(q.LossStart) && r.Committed.Before(end) && q.grantedBefore(f, JobProbe, r.Token) {
				q.LastWriteAfterLoss = max(q.LastWriteAfterLoss, r.Committed.Sub(q.LossStart))
			}
		}
	}
}

// noActing sets each fault's longest time without an accepted probe write,
// from the last write before it started to the first after it settled. For
// partition-slow-db it counts from the cut instead: the leader's database link
// is slowed before the cut, on purpose, so its last writes before it are
// seconds apart and say nothing about leadership.
func noActing(probe []probeRow, faults []*Fault) {
	times := make([]time.Time, 0, len(probe))
	for _, r := range probe {
		if r.Seq > 0 {
			times = append(times, r.Committed)
		}
	}
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	for _, f := range faults {
		end := f.Settled
		if end.IsZero() {
			end = f.Healed.Add(readyBound)
		}
		i, _ := slices.BinarySearchFunc(times, f.Start, func(a, b time.Time) int { return a.Compare(b) })
		prev := f.Start
		if i > 0 && f.Kind != PartitionSlowDB {
			prev = times[i-1]
		}
		var gap time.Duration
		for ; i < len(times) && !times[i].After(end); i++ {
			gap = max(gap, times[i].Sub(prev))
			prev = times[i]
		}
		if i == len(times) || times[i].After(end) {
			gap = max(gap, end.Sub(prev))
		}
		f.NoActing = gap
	}
}

// checkRecovery: every fault was followed by a settled cluster, and an
// instance stopped by SIGTERM exited 0.
func (k *checker) checkRecovery(faults []*Fault) {
	for _, f := range faults {
		if f.Err != "" {
			k.violate(InvRecovery, "fault %d (%s of %s): %s", f.N, f.Kind, f.Target, f.Err)
		}
		if (f.Kind == TermLeader || f.Kind == UpgradeRestart) && f.ExitCode != 0 {
			k.violate(InvRecovery, "fault %d: %s exited with status %d after SIGTERM", f.N, f.Target, f.ExitCode)
		}
	}
}
