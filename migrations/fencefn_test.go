package migrations

import (
	"context"
	"testing"
)

// 0017 adds snip_jobs_fence and changes no table: what fenced before it
// fences as before. Its Down drops the function and keeps fencing_tokens'
// rows, whoever wrote them; Up again brings the function back, and it
// carries on from the stored tokens.
func TestTheFenceFunctionGoesWithItsDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, c := migratedTo(t, 16)
	fence := func(token int64) error {
		tx, err := c.Begin(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if _, err := tx.Exec(ctx, "SELECT snip_jobs_fence('export:nightly', $1, 'server-1')", token); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	exists := func() bool {
		var ok bool
		if err := c.QueryRow(ctx, "SELECT to_regprocedure('snip_jobs_fence(text, bigint, text, interval)') IS NOT NULL").Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if exists() {
		t.Fatal("snip_jobs_fence exists before 0017")
	}
	if _, err := p.UpByOne(ctx); err != nil {
		t.Fatalf("0017 up: %v", err)
	}
	if err := fence(3); err != nil {
		t.Fatalf("after 0017, token 3: %v", err)
	}

	if _, err := p.Down(ctx); err != nil {
		t.Fatalf("0017 down: %v", err)
	}
	if v, err := p.GetDBVersion(ctx); err != nil || v != 16 {
		t.Errorf("after 0017's down: version %d, %v; want 16", v, err)
	}
	if exists() {
		t.Error("snip_jobs_fence is still there after 0017's down")
	}
	var token int64
	var holder string
	if err := c.QueryRow(ctx, "SELECT token, holder FROM fencing_tokens WHERE resource = 'export:nightly'").Scan(&token, &holder); err != nil || token != 3 || holder != "server-1" {
		t.Errorf("after 0017's down: stored token %d holder %q (%v); want 3 server-1, kept", token, holder, err)
	}

	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("up again: %v", err)
	}
	if err := fence(2); err == nil {
		t.Error("up again: token 2 after 3 went through")
	}
	if err := fence(4); err != nil {
		t.Errorf("up again: token 4 after 3: %v", err)
	}
}
