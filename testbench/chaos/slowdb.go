package chaos

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snip/snip-jobs/internal/sleep"
)

// slowProbeLeader slows the probe leader's database link (slowLink's first
// latency) and returns once one of its probe transactions has run its INSERT
// and waits for the client (idle in transaction, its last statement the
// INSERT): the moment the database answers, with the leader's COMMIT to come.
// The INSERT must have run, not only been parsed: on a new connection pgx
// first prepares the statement (Parse/Describe, a round trip of its own),
// after which the backend shows the same state and query. Only a transaction
// that has written has an xid (backend_xid); matching the parse instead cut
// the link a round trip early, so that the term had ended before the INSERT's
// answer came and the broken build's stale COMMIT was never sent (the checker
// then found nothing in 12 faults, in one CI run).
func (c *cluster) slowProbeLeader(ctx context.Context) (*instance, error) {
	ctx, cancel := context.WithTimeout(ctx, 6*c.opts.TTL+20*time.Second)
	defer cancel()
	d, _ := c.opts.slowLink()
	var in *instance
	defer func() {
		if ctx.Err() != nil && in != nil {
			in.db.SetDelay(0)
		}
	}()
	for {
		l, ok := c.obs.leaders()[JobProbe]
		if next := c.instance(l.Instance); ok && next != in {
			if in != nil {
				in.db.SetDelay(0)
			}
			in = next
			in.db.SetDelay(d)
		}
		if in != nil {
			var n int
			err := c.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE state = 'idle in transaction' AND query LIKE 'INSERT INTO chaos_probe%' AND backend_xid IS NOT NULL
				AND client_port = ANY($1)`,
				in.db.UpstreamPorts()).Scan(&n)
			if err == nil && n > 0 {
				return in, nil
			}
		}
		if !sleep.For(ctx, 2*time.Millisecond) {
			return nil, fmt.Errorf("no probe transaction of the probe's leader seen waiting after its INSERT: %w (its connections: %s)",
				ctx.Err(), c.describeConns(in))
		}
	}
}

// slowLink is the latency of the probe leader's database link in a
// partition-slow-db fault: answer until the cut (so for the INSERT's answer,
// which the cut finds on its way), after from the cut on (so for the COMMIT
// that answer prompts, if the leader's term still looks valid).
//
// The cut comes at most one renew interval after the leader's last keep-alive
// was sent, so its term's deadline is between TTL − renew interval − margin
// and TTL − margin after the cut. answer (TTL − (margin + renew interval)/2:
// 1.55 s of a 2 s TTL) brings the INSERT's answer after the deadline of every
// term with the margin, and before that of every term were the margin zero
// (the broken build): with the margin, COMMIT is never sent; without it, it is
// sent every time. (That needs a margin above the renew interval, as in the
// harness's own timing; with -default-timing some COMMITs of either build go
// out, or none.) after holds that COMMIT until about 2¼ TTL after the cut:
// after the successor's first write (the old lease expires at etcd by TTL
// after the cut, then the campaign and the probe's first run), and before
// PostgreSQL ends the transaction for idleness (3 TTL, fencing). Were COMMIT
// to land before the successor's write, nothing would be out of order.
func (o Options) slowLink() (answer, after time.Duration) {
	answer = o.TTL - (o.margin()+o.renewInterval())/2
	return answer, o.TTL*9/4 - answer
}

// describeConns says what in's database connections are doing, for an error
// message.
func (c *cluster) describeConns(in *instance) string {
	if in == nil {
		return "no leader"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rows, err := c.pool.Query(ctx, `SELECT format('%s %s%s, %s in it, xact %s, xid %s: %s', pid, state,
			coalesce(' (' || wait_event_type || ':' || wait_event || ')', ''), round(extract(epoch FROM now() - state_change)::numeric, 1) || 's',
			coalesce(round(extract(epoch FROM now() - xact_start)::numeric, 1) || 's', '-'), coalesce(backend_xid::text, '-'), left(query, 40))
		FROM pg_stat_activity WHERE client_port = ANY($1) ORDER BY pid`, in.db.UpstreamPorts())
	if err != nil {
		return err.Error()
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err.Error()
	}
	return strings.Join(lines, "; ")
}
