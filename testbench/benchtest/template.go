package benchtest

import (
	"context"
	"fmt"
	"sync"
	"testing"
)

// template is one template database of a cluster, built at most once.
type template struct {
	once sync.Once
	err  error
}

// Template makes sure the cluster has the template database name, building it
// on first use: an empty database that build sets up through its superuser
// URL, then frozen (no connections allowed), so every CreateDatabaseFrom is a
// copy of what build left. Concurrent callers wait for the one build; its
// failure is returned to every caller. build must close its connections:
// PostgreSQL copies no database that has a session.
//
// The cluster is private to this process (a test binary's shared cluster or a
// test's StartPostgres), so an in-process once is enough.
func (p *Postgres) Template(name string, build func(ctx context.Context, url string) error) error {
	v, _ := p.templates.LoadOrStore(name, &template{})
	tm := v.(*template)
	tm.once.Do(func() {
		ctx := context.Background()
		url, err := p.c.CreateDatabase(ctx, name)
		if err == nil {
			err = build(ctx, url)
		}
		if err == nil {
			err = p.c.MakeTemplate(ctx, name)
		}
		if err != nil {
			tm.err = fmt.Errorf("template database %s: %w", name, err)
		}
	})
	return tm.err
}

// CreateDatabaseFrom creates a new database with a unique name as a copy of
// the template database template (see Template) and returns its URL. The
// database is not dropped; it goes away with the cluster.
func (p *Postgres) CreateDatabaseFrom(t testing.TB, template string) string {
	t.Helper()
	url, err := p.c.CreateDatabaseFrom(context.Background(), p.dbName(t), template)
	if err != nil {
		t.Fatalf("benchtest: %v", err)
	}
	return url
}

// SharedPostgres returns the test binary's shared cluster (the one behind
// PostgresDB), starting it on first use. Stop and Start are refused on it.
func SharedPostgres(t testing.TB) *Postgres {
	t.Helper()
	p, err := sharedPostgres()
	if err != nil {
		t.Fatalf("benchtest: %v", err)
	}
	return p
}
