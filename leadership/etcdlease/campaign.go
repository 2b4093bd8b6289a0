package etcdlease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/snip/snip-jobs/internal/sleep"
	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/leadership/etcdlease/layout"
)

// LeaderRecord is the value of a leader key.
type LeaderRecord struct {
	Instance string    `json:"instance"`
	Host     string    `json:"host"`
	PID      int       `json:"pid"`
	Since    time.Time `json:"since"` // wall clock when the term was won, for people
}

// Contend is one create-if-absent of the leader key on this lease; when
// another holder has it, it watches the key until it is deleted (and, in
// case a watch event is missed, for 3×TTL at most), then returns for the
// session to judge again.
func (h *lease) Contend(ctx context.Context, job string) (leadership.Claim, error) {
	key := layout.LeaderKey(h.st.cfg.Prefix, job)
	c, holderRev, err := h.tryAcquire(ctx, job, key)
	if c == nil && err == nil && holderRev > 0 {
		h.waitForDelete(ctx, key, holderRev)
	}
	if c == nil {
		return nil, err
	}
	return c, nil
}

// tryAcquire makes one create-if-absent attempt. It returns the claim on
// success; else the revision at which another holder was seen (to watch from),
// or an error.
func (h *lease) tryAcquire(ctx context.Context, job, key string) (*claim, int64, error) {
	st := h.st
	// The request ends with the lease or a timeout, whichever is first, not
	// with the campaign (ctx): etcd may commit it with its answer lost,
	// leaving the leader key on this live lease with no term, which no peer
	// would take. The session hands back a win the campaign no longer wants.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), st.cfg.TTL)
	defer cancel()
	stop := context.AfterFunc(h.l.Context(), cancel)
	defer stop()

	val, err := json.Marshal(LeaderRecord{Instance: st.cfg.Instance, Host: st.cfg.Host, PID: os.Getpid(), Since: time.Now()})
	if err != nil {
		return nil, 0, err
	}
	resp, err := st.cfg.Client.Txn(rctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(val), clientv3.WithLease(h.id))).
		Else(clientv3.OpGet(key)).
		Commit()
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		h.l.End(leadership.Ended(leadership.ReasonLeaseLost, "etcd reports lease %x gone (campaign for %s)", int64(h.id), job))
		return nil, 0, err
	}
	if err != nil {
		return nil, 0, err
	}
	if !resp.Succeeded {
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			return nil, 0, nil // deleted in between: try again now
		}
		if clientv3.LeaseID(kvs[0].Lease) == h.id {
			// Our own key, from an attempt whose answer was lost. Taking it over would
			// reuse a token; delete it (only that exact key) and create a fresh one.
			_, err := st.cfg.Client.Txn(rctx).
				If(clientv3.Compare(clientv3.CreateRevision(key), "=", kvs[0].CreateRevision)).
				Then(clientv3.OpDelete(key)).
				Commit()
			return nil, 0, err
		}
		return nil, resp.Header.Revision, nil
	}
	if st.afterWinTxn != nil {
		st.afterWinTxn()
	}
	return &claim{st: st, job: job, key: key, token: resp.Header.Revision}, 0, nil
}

// waitForDelete returns when key is deleted after revision rev, when the watch
// breaks, after the slow re-check interval, or when ctx is done.
func (h *lease) waitForDelete(ctx context.Context, key string, rev int64) {
	wctx, cancel := context.WithTimeout(ctx, 3*h.st.cfg.TTL)
	defer cancel()
	defer h.l.Waiting()()
	for resp := range h.st.cfg.Client.Watch(clientv3.WithRequireLeader(wctx), key, clientv3.WithRev(rev+1)) {
		if resp.Err() != nil {
			return
		}
		for _, ev := range resp.Events {
			if ev.Type == clientv3.EventTypeDelete {
				return
			}
		}
	}
}

// claim is a leader key this session created: its CreateRevision is the
// term's token (etcd revisions are global and only grow).
type claim struct {
	st    *store
	job   string
	key   string
	token int64
}

func (c *claim) Token() int64 { return c.token }

// Release deletes the leader key if it is still this term's (guarded by its
// CreateRevision).
func (c *claim) Release(ctx context.Context) error {
	_, err := c.st.cfg.Client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(c.key), "=", c.token)).
		Then(clientv3.OpDelete(c.key)).
		Commit()
	if errors.Is(err, rpctypes.ErrPermissionDenied) || errors.Is(err, rpctypes.ErrAuthFailed) || errors.Is(err, rpctypes.ErrInvalidAuthToken) {
		return fmt.Errorf("%w: %w", leadership.ErrRefused, err)
	}
	return err
}

// lost is why the leader key is gone: taken over when the job's takeover
// record names this term (Cluster.TakeOver writes both at once), else lost.
// A record that cannot be read leaves it lost: the term is over either way.
func (c *claim) lost(ctx context.Context, format string, args ...any) *leadership.EndedError {
	rctx, cancel := context.WithTimeout(ctx, c.st.cfg.RenewInterval)
	defer cancel()
	resp, err := c.st.cfg.Client.Get(rctx, layout.TakeoverKey(c.st.cfg.Prefix, c.job))
	if err == nil && len(resp.Kvs) == 1 {
		var t takeover
		if json.Unmarshal(resp.Kvs[0].Value, &t) == nil && t.Token == c.token {
			return leadership.Ended(leadership.ReasonTakenOver, "leader key %s deleted by %s's takeover", c.key, t.By)
		}
	}
	return leadership.Ended(leadership.ReasonKeyLost, format, args...)
}

// Follow watches the leader key until it is deleted or replaced. A broken
// watch (compaction, reconnect) is followed by a Get that re-checks the key.
func (c *claim) Follow(ctx context.Context) *leadership.EndedError {
	cli, renew := c.st.cfg.Client, c.st.cfg.RenewInterval
	next := c.token + 1
	for ctx.Err() == nil {
		for resp := range cli.Watch(ctx, c.key, clientv3.WithRev(next)) {
			if resp.Err() != nil {
				break
			}
			for _, ev := range resp.Events {
				switch {
				case ev.Type == clientv3.EventTypeDelete:
					return c.lost(ctx, "leader key %s deleted at revision %d", c.key, ev.Kv.ModRevision)
				case ev.Kv.CreateRevision != c.token:
					return c.lost(ctx, "leader key %s replaced at revision %d", c.key, ev.Kv.ModRevision)
				}
			}
			next = resp.Header.Revision + 1
		}
		if ctx.Err() != nil {
			return nil
		}
		// The watch broke: look at the key directly, then watch again from there.
		rctx, cancel := context.WithTimeout(ctx, renew)
		resp, err := cli.Get(rctx, c.key)
		cancel()
		switch {
		case err != nil:
			// etcd unreachable: the lease deadline ends the term if this lasts.
			sleep.For(ctx, renew/4)
		case len(resp.Kvs) == 0:
			return c.lost(ctx, "leader key %s gone", c.key)
		case resp.Kvs[0].CreateRevision != c.token:
			return c.lost(ctx, "leader key %s replaced (create revision %d)", c.key, resp.Kvs[0].CreateRevision)
		default:
			next = resp.Header.Revision + 1
		}
	}
	return nil
}
