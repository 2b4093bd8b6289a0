// Scratch: a PostgreSQL cluster with the bench's backlog, left running for psql.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"

	"github.com/jackc/pgx/v5"
	"github.com/snip/snip-jobs/internal/pgcluster"
	"github.com/snip/snip-jobs/migrations"
)

func main() {
	ctx := context.Background()
	c, err := pgcluster.Create(ctx, pgcluster.Options{})
	if err != nil {
		panic(err)
	}
	defer c.Destroy()
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		panic(err)
	}
	for _, s := range []string{`ALTER SYSTEM SET shared_buffers = '1GB'`, `ALTER SYSTEM SET max_wal_size = '4GB'`} {
		if _, err := conn.Exec(ctx, s); err != nil {
			panic(err)
		}
	}
	conn.Close(ctx)
	c.Stop()
	if err := c.Start(ctx); err != nil {
		panic(err)
	}
	url, err := c.CreateDatabase(ctx, "bench")
	if err != nil {
		panic(err)
	}
	if _, err := migrations.Up(ctx, url, slog.Default()); err != nil {
		panic(err)
	}
	conn, err = pgx.Connect(ctx, url)
	if err != nil {
		panic(err)
	}
	for _, s := range []string{
		`INSERT INTO links (id, slug) SELECT g, 'l' || g FROM generate_series(1, 10001) g`,
		`UPDATE click_aggregator_state SET prev = pg_current_snapshot()`,
		`DO $$ BEGIN FOR i IN 1..2000 LOOP
			INSERT INTO click_events (link_id, clicked_at, referrer_host, country)
			SELECT CASE WHEN random() < 0.8 THEN 1 ELSE 2 + floor(random() * 10000)::bigint END,
				now() - random() * interval '1 hour', 'news.example.com', 'FR'
			FROM generate_series(1, 1000);
			COMMIT;
		END LOOP; END $$`,
		`VACUUM ANALYZE click_events`, `CHECKPOINT`,
	} {
		if _, err := conn.Exec(ctx, s); err != nil {
			panic(err)
		}
	}
	fmt.Println(url)
	fmt.Println("socket dir:", c.Dir(), "port", c.Port())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt)
	<-sig
}
