package etcdlease

import (
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/leadership/etcdlease/layout"
)

// DefaultPrefix is the key prefix shared by all instances unless set.
const DefaultPrefix = layout.DefaultPrefix

// Config configures a session on etcd. Zero fields take the defaults noted on each.
type Config struct {
	// Client is the etcd client. Required. The session does not close it.
	Client *clientv3.Client
	// Prefix is the key prefix shared by all instances (default "/snip-jobs").
	// Leader keys live under <Prefix>/leaders/, registrations under <Prefix>/instances/.
	Prefix string
	// Config is the instance's name and the lease's timing.
	leadership.Config
}

// NewSession validates cfg and starts a session on etcd in the background:
// it grants a lease, registers the instance, and keeps the lease alive until
// Close. It returns at once; WaitReady waits for the first lease.
func NewSession(cfg Config) (*leadership.Session, error) { return leadership.Start(newStore(cfg)) }

// newStore validates cfg and makes the store a session runs on.
func newStore(cfg Config) (*store, error) {
	cfg.Config.Rules = layout.Rules
	if cfg.Client == nil {
		_, err := cfg.Config.WithDefaults()
		return nil, errors.Join(errors.New("leadership: Client is required"), err)
	}
	c, err := cfg.Config.WithDefaults()
	if err != nil {
		return nil, err
	}
	cfg.Config, cfg.Prefix = c, layout.Prefix(cfg.Prefix)
	st := &store{cfg: cfg, log: c.Logger.With("instance", c.Instance)}
	if !leadership.RidesOutElections(c.Rules, c.TTL, c.Margin, c.RenewInterval) {
		st.log.Warn("an etcd leader election can end this instance's terms: TTL − margin − renew interval is less than "+
			"twice etcd's default election timeout (docs/operations.md, \"The smallest safe TTL\")",
			"ttl", c.TTL, "margin", c.Margin, "renew_interval", c.RenewInterval, "election_allowance", c.Rules.ElectionAllowance)
	}
	return st, nil
}

// store is the etcd backend's leadership.Store.
type store struct {
	cfg Config
	log *slog.Logger

	// onKeepAlive, when set by a test in this package, is called as each
	// keep-alive is sent: why, and the send time its answer would count from.
	onKeepAlive func(why sendReason, sentAt time.Time)
	// afterWinTxn, when set by a test in this package, runs between etcd's
	// answer to a winning campaign and the session's deadline check: a
	// pause at the worst moment.
	afterWinTxn func()
	// kaMember is the address of the member the newest keep-alive stream
	// reached (for tests in this package).
	kaMember atomic.Pointer[string]
	// opened is etcd's revision when the session's first lease was granted:
	// resign requests are watched from there (every term of the session's,
	// and so every request naming one, comes later).
	opened atomic.Int64
}

var _ leadership.Store = (*store)(nil)

func (st *store) Config() leadership.Config { return st.cfg.Config }
