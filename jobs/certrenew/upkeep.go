package certrenew

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/snip/snip-jobs/jobs/certrenew/domainstore"
	"github.com/snip/snip-jobs/jobs/certrenew/keyring"
	"github.com/snip/snip-jobs/scheduler"
)

// upkeep is the part of a pass that is about no one domain: it removes
// expired challenge tokens and old history, re-seals stored keys after a key
// rotation, and counts what the gauges need. Its writes are fenced; it never
// talks to the CA.
type upkeep struct {
	pool *pgxpool.Pool
	keys *keyring.Keyring
	r    *scheduler.Run
	log  *slog.Logger
}

// Retention of history rows (housekeeping).
const (
	keepOrders       = 30 * 24 * time.Hour
	keepTerms        = 30 * 24 * time.Hour
	keepReplacedCert = 30 * 24 * time.Hour // after its not-after
)

// housekeeping removes expired challenge tokens and old history.
func (u *upkeep) housekeeping(ctx context.Context) error {
	return u.r.Fenced(ctx, func(ctx context.Context, tx pgx.Tx) error {
		for _, q := range []struct {
			sql  string
			args []any
		}{
			{`DELETE FROM certrenew_challenges WHERE expires_at < now()`, nil},
			{`DELETE FROM certrenew_orders WHERE started_at < now() - make_interval(secs => $1) AND result IS NOT NULL`, []any{keepOrders.Seconds()}},
			{`DELETE FROM certrenew_terms WHERE job = $1 AND state <> 'running' AND seen_at < now() - make_interval(secs => $2)`, []any{u.r.Job, keepTerms.Seconds()}},
			{`DELETE FROM certrenew_certificates WHERE NOT current AND not_after < now() - make_interval(secs => $1)`, []any{keepReplacedCert.Seconds()}},
		} {
			if _, err := tx.Exec(ctx, q.sql, q.args...); err != nil {
				return err
			}
		}
		return nil
	})
}

// reseal re-encrypts, with the sealing key, every stored key sealed with
// another key of the ring (key rotation). Keys sealed with a key no longer in
// the ring are left alone and logged.
func (u *upkeep) reseal(ctx context.Context) error {
	keys := u.keys
	cur := keys.KeyID()
	todo, err := u.sealedWithOthers(ctx, cur)
	if err != nil || len(todo) == 0 {
		return err
	}
	resealed := 0
	err = u.r.Fenced(ctx, func(ctx context.Context, tx pgx.Tx) error {
		resealed = 0
		for _, b := range todo {
			pt, err := keys.Open(b.sealed, b.aad)
			if err != nil {
				u.log.ErrorContext(ctx, "stored key cannot be opened with the keyring: it stays sealed with its old key",
					"table", b.table, "row", b.key, "sealed_with", keyring.SealedWith(b.sealed), "err", err)
				continue
			}
			if _, err := tx.Exec(ctx, b.update, b.key, keys.Seal(pt, b.aad), cur); err != nil {
				return err
			}
			resealed++
		}
		return nil
	})
	if err != nil {
		return err
	}
	if resealed > 0 {
		u.log.InfoContext(ctx, "re-sealed stored keys with the sealing key", "count", resealed, "sealing_key", cur)
	}
	return nil
}

// sealedBlob is a stored key sealed with another key than the sealing key.
type sealedBlob struct {
	table, key string // table, and the row's key column value
	update     string // re-seals it: key, sealed, key id
	aad        string
	sealed     []byte
}

// sealedWithOthers reads the stored keys sealed with another key than cur
// (at most 1000 certificates a pass).
func (u *upkeep) sealedWithOthers(ctx context.Context, cur string) ([]sealedBlob, error) {
	var todo []sealedBlob
	for _, q := range []struct {
		table, sql, update string
		aad                func(string) string
	}{
		{"certrenew_certificates", `SELECT id::text, domain, key_sealed FROM certrenew_certificates WHERE key_id <> $1 LIMIT 1000`,
			`UPDATE certrenew_certificates SET key_sealed = $2, key_id = $3 WHERE id = $1::bigint`, keyring.CertificateAAD},
		{"certrenew_account", `SELECT directory, directory, key_sealed FROM certrenew_account WHERE key_id <> $1`,
			`UPDATE certrenew_account SET key_sealed = $2, key_id = $3 WHERE directory = $1`, keyring.AccountAAD},
		{"certrenew_domains", `SELECT domain, domain, order_key_sealed FROM certrenew_domains WHERE order_key_id <> $1`,
			`UPDATE certrenew_domains SET order_key_sealed = $2, order_key_id = $3 WHERE domain = $1`, keyring.CertificateAAD},
	} {
		rows, err := u.pool.Query(ctx, q.sql, cur)
		if err != nil {
			return nil, err
		}
		var key, aadOf string
		var sealed []byte
		if _, err := pgx.ForEachRow(rows, []any{&key, &aadOf, &sealed}, func() error {
			todo = append(todo, sealedBlob{table: q.table, key: key, update: q.update, aad: q.aad(aadOf), sealed: slices.Clone(sealed)})
			return nil
		}); err != nil {
			return nil, err
		}
	}
	return todo, nil
}

// counts is the orders started in the budget's window and the keys still
// sealed with another key than the sealing key (the gauges).
func (u *upkeep) counts(ctx context.Context) (used, old int, err error) {
	err = u.pool.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM certrenew_orders WHERE started_at > now() - make_interval(secs => $1)),
			(SELECT count(*) FROM certrenew_certificates WHERE key_id <> $2)
			+ (SELECT count(*) FROM certrenew_account WHERE key_id <> $2)
			+ (SELECT count(*) FROM certrenew_domains WHERE order_key_id <> $2)`,
		domainstore.BudgetWindow.Seconds(), u.keys.KeyID()).Scan(&used, &old)
	return used, old, err
}
