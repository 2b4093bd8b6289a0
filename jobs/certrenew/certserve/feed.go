package certserve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/snip/snip-jobs/internal/pglisten"
)

// Config is what every reader needs.
type Config struct {
	// DB says how to reach PostgreSQL. The reader opens one connection of its
	// own with it (a copy) and keeps it LISTENing. Required.
	DB *pgx.ConnConfig
	// Log receives the reader's lines; nil discards them.
	Log *slog.Logger
	// Metrics, if set, receives the reader's series (snip_certserve_*).
	Metrics prometheus.Registerer
	// Resync is the period of the full re-read, the fallback for anything a
	// notification did not say. Default DefaultResync.
	Resync time.Duration
}

// DefaultResync is the period of the full re-read when Config sets none.
const DefaultResync = 5 * time.Minute

func (c Config) check(what string) (Config, error) {
	if c.DB == nil {
		return c, fmt.Errorf("certserve: %s: Config.DB is required", what)
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Resync <= 0 {
		c.Resync = DefaultResync
	}
	return c, nil
}

// feed keeps a reader's memory current with a table: on a dedicated
// connection it LISTENs on channel, then loads everything, then applies each
// notification as it comes. It loads everything again every resync and after
// every reconnection. LISTEN comes before the load, so a row committed in
// between is both read and notified, never missed.
type feed struct {
	cfg     Config
	channel string
	m       *feedMetrics
	// load reads everything; apply handles one notification's payload. Both
	// run on the feed's goroutine, one at a time, on its connection.
	load  func(ctx context.Context, conn *pgx.Conn) error
	apply func(ctx context.Context, conn *pgx.Conn, payload string) error
	// loaded is called after each successful full load.
	loaded func()
}

// run keeps the memory current until ctx ends; it returns ctx's error.
func (f *feed) run(ctx context.Context) error {
	defer f.m.up.Set(0)
	return pglisten.Run(ctx, f.cfg.DB, f.channel, f.session, func(err error, retryIn time.Duration) {
		f.m.up.Set(0)
		if !errors.Is(err, pglisten.ErrReconnect) {
			f.cfg.Log.WarnContext(ctx, "certserve: lost PostgreSQL; serving what was last read, and reconnecting",
				"channel", f.channel, "retry_in", retryIn, "err", err)
		}
	})
}

// session loads everything on a listening connection, then applies
// notifications, and loads everything again at each resync, until an error.
// loaded says whether it read everything at least once.
func (f *feed) session(ctx context.Context, conn *pgx.Conn) (loaded bool, err error) {
	for {
		if err := f.load(ctx, conn); err != nil {
			return loaded, fmt.Errorf("read %s: %w", f.channel, err)
		}
		loaded = true
		f.m.loads.WithLabelValues("full").Inc()
		f.m.up.Set(1)
		f.loaded()
		if err := f.follow(ctx, conn); err != nil {
			return loaded, err
		}
	}
}

// follow applies notifications until the next resync is due (nil) or an error.
func (f *feed) follow(ctx context.Context, conn *pgx.Conn) error {
	wctx, cancel := context.WithTimeout(ctx, f.cfg.Resync)
	defer cancel()
	for {
		n, err := conn.WaitForNotification(wctx)
		switch {
		case err != nil && ctx.Err() == nil && errors.Is(wctx.Err(), context.DeadlineExceeded):
			// The resync is due. pgx ends the wait with a read deadline and
			// keeps the connection; should it have closed it, a new session
			// reads everything instead.
			if conn.IsClosed() {
				return errResync
			}
			return nil
		case err != nil:
			return fmt.Errorf("wait for notifications: %w", err)
		}
		if err := f.apply(ctx, conn, n.Payload); err != nil {
			return fmt.Errorf("apply a notification on %s: %w", f.channel, err)
		}
		f.m.loads.WithLabelValues("notification").Inc()
	}
}

// errResync ends a session whose connection closed at a resync (pgx closes a
// connection whose wait is cancelled): the next session, at once, reads
// everything, as the resync would have.
var errResync = fmt.Errorf("resync on a new connection: %w", pglisten.ErrReconnect)

// feedMetrics are one reader's series.
type feedMetrics struct {
	up    prometheus.Gauge
	loads *prometheus.CounterVec
}

func newFeedMetrics(reg prometheus.Registerer, reader string) *feedMetrics {
	l := prometheus.Labels{"reader": reader}
	m := &feedMetrics{
		up: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "snip_certserve_feed_up", ConstLabels: l,
			Help: "1 while the reader is connected to PostgreSQL and current, 0 while it serves what it last read.",
		}),
		loads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "snip_certserve_reads_total", ConstLabels: l,
			Help: "Reads of the renewer's table: full (start, reconnection, resync) or for one notification.",
		}, []string{"kind"}),
	}
	if reg != nil {
		reg.MustRegister(m.up, m.loads)
	}
	return m
}
