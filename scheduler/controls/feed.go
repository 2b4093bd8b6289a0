package controls

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snip/snip-jobs/internal/notify"
	"github.com/snip/snip-jobs/internal/pglisten"
)

// FeedConfig is what a Feed needs.
type FeedConfig struct {
	// DB says how to reach PostgreSQL: the feed opens one connection of its
	// own with a copy of it, named "snip-jobs controls <instance>" (which is
	// how a request of a job that runs everywhere tells the instances up).
	DB       *pgx.ConnConfig
	Instance string
	// Resync is the period of the re-read that does not wait for a
	// notification: the renew interval (default a second).
	Resync time.Duration
	Log    *slog.Logger
}

// Feed keeps the controls current on an instance: on a connection of its own
// it LISTENs on Channel, then reads them (Read), and reads them again at each
// notification, every Resync, and after every reconnection (LISTEN comes
// before the read, so a change committed in between is read either way).
// While PostgreSQL cannot be reached it keeps what it read last.
type Feed struct {
	cfg     FeedConfig
	state   atomic.Pointer[State] // nil until the first read
	up      atomic.Bool
	reads   atomic.Int64
	changed notify.Notifier
}

// NewFeed checks cfg and makes a Feed; Run runs it.
func NewFeed(cfg FeedConfig) (*Feed, error) {
	if cfg.DB == nil {
		return nil, errors.New("controls: FeedConfig.DB is required")
	}
	if cfg.Resync <= 0 {
		cfg.Resync = time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	db := cfg.DB.Copy()
	if db.RuntimeParams == nil {
		db.RuntimeParams = map[string]string{}
	}
	db.RuntimeParams["application_name"] = AppName(cfg.Instance)
	cfg.DB = db
	return &Feed{cfg: cfg}, nil
}

// AppName is the application_name of an instance's feed connection.
func AppName(instance string) string { return "snip-jobs controls " + instance }

// Current returns the controls as last read, and false before the first read.
func (f *Feed) Current() (State, bool) {
	s := f.state.Load()
	if s == nil {
		return State{}, false
	}
	return *s, true
}

// Changed returns a channel closed after the next read (whether or not
// anything changed): take it, look at Current, then wait on it.
func (f *Feed) Changed() <-chan struct{} { return f.changed.Wait() }

// Up reports whether the feed is connected and its last read succeeded.
func (f *Feed) Up() bool { return f.up.Load() }

// Reads is how many times the feed has read the controls.
func (f *Feed) Reads() int64 { return f.reads.Load() }

// Run keeps the controls current until ctx ends; it returns ctx's error.
func (f *Feed) Run(ctx context.Context) error {
	defer func() {
		f.up.Store(false)
		f.changed.Notify()
	}()
	return pglisten.Run(ctx, f.cfg.DB, Channel, f.session, func(err error, retryIn time.Duration) {
		f.up.Store(false)
		f.changed.Notify()
		f.cfg.Log.Warn("controls: lost PostgreSQL; keeping the controls last read, and reconnecting",
			"retry_in", retryIn, "err", err)
	})
}

// session reads the controls on a listening connection, then again at each
// notification and every Resync, until an error. read says whether it read
// them at least once.
func (f *Feed) session(ctx context.Context, conn *pgx.Conn) (read bool, err error) {
	for {
		if err := f.read(ctx, conn); err != nil {
			return read, err
		}
		read = true
		wctx, cancel := context.WithTimeout(ctx, f.cfg.Resync)
		_, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return read, ctx.Err()
		case err != nil && conn.IsClosed():
			return read, fmt.Errorf("wait for notifications: %w", err)
		}
		// A notification or the resync: read again.
	}
}

// read reads the controls on conn and publishes them.
func (f *Feed) read(ctx context.Context, conn *pgx.Conn) error {
	rctx, cancel := context.WithTimeout(ctx, max(f.cfg.Resync, 5*time.Second))
	defer cancel()
	s, err := Read(rctx, conn)
	if err != nil {
		return err
	}
	f.state.Store(&s)
	f.reads.Add(1)
	f.up.Store(true)
	f.changed.Notify()
	return nil
}
