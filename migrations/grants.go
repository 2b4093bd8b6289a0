package migrations

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// grant is what a role needs on some objects of the schema.
type grant struct {
	privileges []string // "SELECT", "INSERT", … (USAGE for a sequence's nextval)
	kind       string   // "TABLE", "SEQUENCE" or "FUNCTION"
	objects    []string
}

// runtimeGrants are the privileges `snip-jobs run` (and status, certs, report)
// needs on the tables these migrations create, and no more: no DDL, no
// TRUNCATE, no trigger, no ownership (the owner role keeps those). Add to it
// with every migration that creates a table or changes what the code does
// with one: TestEveryTableOfTheSchemaIsGrantedOrListedAsNot fails until then.
var runtimeGrants = []grant{
	{[]string{"SELECT"}, "TABLE", []string{"goose_db_version"}}, // run compares the schema at start
	{[]string{"SELECT", "INSERT", "UPDATE"}, "TABLE", []string{
		"fencing_tokens",
		"link_counts", "link_hourly_counts",
		"weekly_reports",
		"certrenew_account", "certrenew_job", "certrenew_domains", "certrenew_order_urls",
	}},
	{[]string{"SELECT", "INSERT", "UPDATE", "DELETE"}, "TABLE", []string{"job_terms", "job_runs", "cron_slots"}}, // the scheduler prunes its history
	{[]string{"SELECT", "INSERT", "UPDATE", "DELETE"}, "TABLE", []string{ // the operators' controls (resume, undrain; pruned)
		"job_pauses", "instance_drains", "manual_runs", "manual_run_reports",
	}},
	{[]string{"SELECT", "INSERT", "DELETE"}, "TABLE", []string{"fence_rejections"}},
	{[]string{"SELECT", "INSERT"}, "TABLE", []string{"click_rejects"}},
	{[]string{"INSERT"}, "TABLE", []string{"weekly_report_outbox"}},
	{[]string{"SELECT", "UPDATE"}, "TABLE", []string{"click_aggregator_state"}},
	{[]string{"SELECT", "DELETE"}, "TABLE", []string{"click_events"}}, // folded, then pruned
	{[]string{"SELECT", "INSERT", "DELETE"}, "TABLE", []string{"click_aggregator_horizons"}},
	{[]string{"SELECT", "INSERT", "UPDATE", "DELETE"}, "TABLE", []string{
		"certrenew_terms", "certrenew_invalid_domains", "certrenew_certificates", "certrenew_orders",
		"certrenew_challenges", "certrenew_retry_requests",
	}},
	{[]string{"USAGE"}, "SEQUENCE", []string{
		"cron_claim_tokens", "job_runs_id_seq", "fence_rejections_id_seq", "manual_runs_id_seq", "weekly_report_outbox_id_seq",
		"certrenew_certificates_id_seq", "certrenew_orders_id_seq",
	}},
	{[]string{"SELECT"}, "SEQUENCE", []string{"click_events_id_seq"}}, // the aggregator reads its position
}

// fenceGrants are what a program's role needs to fence its own writes with
// snip_jobs_fence (migration 0017, docs/operations.md "Fencing from a
// program"), and no more. The function runs with its owner's rights
// (SECURITY DEFINER): the role needs no privilege on fencing_tokens, so it
// can advance a token only by the fence's rule, never write the table by
// hand. It also needs USAGE on the schema, which PostgreSQL gives PUBLIC
// on public unless revoked (the schema's owner grants it then, as for the
// runtime role). Add to it with every migration that creates a function for
// programs: TestEveryFunctionOfTheSchemaIsCallableByWhoNeedsItAndNoOneElse
// fails until then.
var fenceGrants = []grant{
	{[]string{"EXECUTE"}, "FUNCTION", []string{"snip_jobs_fence(text, bigint, text, interval)"}},
}

// appTables belong to Snip's application when it created them first (the
// migrations create them only if they do not exist): the runtime role reads
// them, and only their owner can grant that.
var appTables = []string{"links", "custom_domains"}

// GrantSQL is the SQL that gives role what the service needs on the schema
// these migrations create, one statement per line: what Grant runs, for
// docs/operations.md and for an operator who grants by hand. The last line,
// on Snip's own tables, is for their owner.
func GrantSQL(role string) string {
	r := pgx.Identifier{role}.Sanitize()
	var b strings.Builder
	for _, g := range runtimeGrants {
		fmt.Fprintf(&b, "GRANT %s ON %s %s TO %s;\n", strings.Join(g.privileges, ", "), g.kind, strings.Join(g.objects, ", "), r)
	}
	fmt.Fprintf(&b, "GRANT SELECT ON TABLE %s TO %s;\n", strings.Join(appTables, ", "), r)
	return b.String()
}

// GrantFenceSQL is the SQL that gives role what a program needs to fence its
// writes (fenceGrants), one statement per line: what GrantFence runs.
func GrantFenceSQL(role string) string {
	r := pgx.Identifier{role}.Sanitize()
	var b strings.Builder
	for _, g := range fenceGrants {
		fmt.Fprintf(&b, "GRANT %s ON %s %s TO %s;\n", strings.Join(g.privileges, ", "), g.kind, strings.Join(g.objects, ", "), r)
	}
	return b.String()
}

// GrantFence gives role, which must exist, what a program needs to fence its
// writes and nothing else (GrantFenceSQL), as the schema's owner connected
// at databaseURL, in one transaction. GRANT is idempotent.
func GrantFence(ctx context.Context, databaseURL, role string) error {
	cfg, err := connConfig(databaseURL, defaultConnectTimeout)
	if err != nil {
		return err
	}
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	if err := roleExists(ctx, db, role); err != nil {
		return fmt.Errorf("migrations: grant the fence: %w", err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrations: grant the fence: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	for _, line := range strings.Split(strings.TrimSpace(GrantFenceSQL(role)), "\n") {
		if _, err := tx.ExecContext(ctx, line); err != nil {
			return fmt.Errorf("migrations: grant the fence: %s: %w", line, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrations: grant the fence: %w", err)
	}
	return nil
}

// roleExists says, as an error naming it, that role does not exist.
func roleExists(ctx context.Context, db *sql.DB, role string) error {
	var exists bool
	if err := db.QueryRowContext(ctx, `SELECT EXISTS (SELECT FROM pg_roles WHERE rolname = $1)`, role).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		return fmt.Errorf("role %q does not exist: create it first (docs/operations.md, \"Database roles\")", role)
	}
	return nil
}

// Grant gives role, which must exist, the privileges the service needs on
// the schema (GrantSQL), as the schema's owner connected at databaseURL, in
// one transaction. GRANT is idempotent: run it after every migration. On
// Snip's tables (links, custom_domains) it grants only those the connected
// role owns; notes names the others, for their owner to grant by hand.
func Grant(ctx context.Context, databaseURL, role string) (notes []string, err error) {
	cfg, err := connConfig(databaseURL, defaultConnectTimeout)
	if err != nil {
		return nil, err
	}
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	if err := roleExists(ctx, db, role); err != nil {
		return nil, fmt.Errorf("migrations: grant: %w", err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("migrations: grant: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	r := pgx.Identifier{role}.Sanitize()
	for _, line := range strings.Split(strings.TrimSpace(GrantSQL(role)), "\n") {
		if strings.Contains(line, " ON TABLE "+strings.Join(appTables, ", ")+" ") {
			continue // below, table by table
		}
		if _, err := tx.ExecContext(ctx, line); err != nil {
			return nil, fmt.Errorf("migrations: grant: %s: %w", line, err)
		}
	}
	for _, t := range appTables {
		var owned bool
		var owner string
		err := tx.QueryRowContext(ctx, `SELECT pg_has_role(current_user, c.relowner, 'USAGE'), pg_get_userbyid(c.relowner)
			FROM pg_class c WHERE c.oid = to_regclass($1)`, t).Scan(&owned, &owner)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			notes = append(notes, fmt.Sprintf("table %s does not exist: once it does, its owner must run GRANT SELECT ON %s TO %s", t, t, r))
		case err != nil:
			return nil, fmt.Errorf("migrations: grant: look up %s: %w", t, err)
		case owned:
			if _, err := tx.ExecContext(ctx, fmt.Sprintf("GRANT SELECT ON TABLE %s TO %s", t, r)); err != nil {
				return nil, fmt.Errorf("migrations: grant: SELECT on %s: %w", t, err)
			}
		default:
			notes = append(notes, fmt.Sprintf("table %s belongs to role %s: as %s, run GRANT SELECT ON %s TO %s", t, owner, owner, t, r))
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("migrations: grant: %w", err)
	}
	return notes, nil
}

// missingPrivileges lists what the connected role lacks of GrantSQL's
// privileges, as "INSERT on job_runs", in one query; nothing for a role that
// owns the schema (or a superuser). Objects that do not exist are skipped.
func missingPrivileges(ctx context.Context, db *sql.DB) ([]string, error) {
	var kinds, objects, privileges []string
	add := func(kind, object, privilege string) {
		kinds, objects, privileges = append(kinds, kind), append(objects, object), append(privileges, privilege)
	}
	for _, g := range runtimeGrants {
		for _, o := range g.objects {
			for _, p := range g.privileges {
				add(g.kind, o, p)
			}
		}
	}
	for _, t := range appTables {
		add("TABLE", t, "SELECT")
	}
	rows, err := db.QueryContext(ctx, `SELECT p || ' on ' || o FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS x(k, o, p, n)
		WHERE to_regclass(o) IS NOT NULL
		  AND NOT CASE k WHEN 'SEQUENCE' THEN has_sequence_privilege(to_regclass(o), p) ELSE has_table_privilege(to_regclass(o), p) END
		ORDER BY n`, kinds, objects, privileges)
	if err != nil {
		return nil, fmt.Errorf("migrations: check the role's privileges: %w", err)
	}
	defer rows.Close()
	var missing []string
	for rows.Next() {
		var m string
		if err := rows.Scan(&m); err != nil {
			return nil, fmt.Errorf("migrations: check the role's privileges: %w", err)
		}
		missing = append(missing, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("migrations: check the role's privileges: %w", err)
	}
	return missing, nil
}
