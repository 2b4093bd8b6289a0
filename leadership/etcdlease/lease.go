package etcdlease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/snip/snip-jobs/internal/sleep"
	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/leadership/etcdlease/layout"
)

// lease is one etcd lease of the session, as the store holds it.
type lease struct {
	st     *store
	l      *leadership.Lease
	id     clientv3.LeaseID
	sentAt time.Time // when the grant request was sent
}

// leaseID is how the store names a lease to the session and to people: hex,
// as etcdctl prints it.
func leaseID(id clientv3.LeaseID) string { return strconv.FormatInt(int64(id), 16) }

func (h *lease) ID() string { return leaseID(h.id) }

// CheckJob: a job name the session accepts (leadership.CheckName) makes a key.
func (st *store) CheckJob(string) error { return nil }

// Open grants a lease and registers the instance on it.
func (st *store) Open(ctx context.Context, l *leadership.Lease) (leadership.Held, error) {
	ctx, cancel := context.WithTimeout(ctx, st.cfg.TTL)
	defer cancel()
	sent := l.Now()
	sentAt := sent.Time()
	resp, err := st.cfg.Client.Grant(ctx, int64(st.cfg.TTL/time.Second))
	if err != nil {
		return nil, fmt.Errorf("grant lease: %w", err)
	}
	st.opened.CompareAndSwap(0, resp.ResponseHeader.GetRevision())
	l.Start(sent, time.Duration(resp.TTL)*time.Second)
	l.Own(leaseID(resp.ID))
	h := &lease{st: st, l: l, id: resp.ID, sentAt: sentAt}
	if err := h.register(ctx); err != nil {
		rctx, rcancel := context.WithTimeout(context.Background(), st.cfg.RenewInterval)
		st.revoke(rctx, h.id)
		rcancel()
		return nil, err
	}
	return h, nil
}

// Release revokes the ended lease, deleting every key on it: at once when
// the session closes; until etcd confirms it gone when the lease expired
// (while etcd has no quorum a lease is not expired, and a new etcd leader
// extends every lease: revoking as soon as etcd is back lets a successor win
// without waiting a further TTL). A lease etcd reported gone needs nothing.
func (h *lease) Release(ctx context.Context, cause *leadership.EndedError) {
	switch cause.Reason {
	case leadership.ReasonLeaseLost:
	case leadership.ReasonShutdown:
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.st.cfg.TTL)
		h.st.revoke(rctx, h.id)
		cancel()
	default:
		go h.st.revokeUntilGone(ctx, h.id)
	}
}

// revoke revokes a lease, deleting every key on it. Errors are logged: the lease
// expires on its own anyway.
func (st *store) revoke(ctx context.Context, id clientv3.LeaseID) error {
	_, err := st.cfg.Client.Revoke(ctx, id)
	if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		st.log.Warn("revoke failed", "lease", leaseID(id), "err", err)
		return err
	}
	return nil
}

// revokeUntilGone keeps trying to revoke a lost lease until etcd confirms it is
// gone or ctx (the session) ends.
func (st *store) revokeUntilGone(ctx context.Context, id clientv3.LeaseID) {
	for {
		rctx, cancel := context.WithTimeout(ctx, st.cfg.RenewInterval)
		err := st.revoke(rctx, id)
		cancel()
		if err == nil || ctx.Err() != nil {
			return
		}
		sleep.For(ctx, st.cfg.RenewInterval/2)
	}
}

// record is the value of an instance's registration key, as every release
// of snip-jobs reads and writes it (a rolling upgrade runs two side by side).
type record struct {
	Instance  string    `json:"instance"`
	Host      string    `json:"host"`
	PID       int       `json:"pid"`
	Started   time.Time `json:"started"` // wall clock, for people; never compared
	ProcStart uint64    `json:"proc_start,omitempty"`
	PIDNS     string    `json:"pid_ns,omitempty"`
	Lease     int64     `json:"lease"`
}

func (r record) registration() leadership.Registration {
	return leadership.Registration{
		Instance: r.Instance, Started: r.Started, Lease: leaseID(clientv3.LeaseID(r.Lease)),
		Process: leadership.Process{Host: r.Host, PID: r.PID, Start: r.ProcStart, PIDNamespace: r.PIDNS},
	}
}

// DuplicateInstanceError means another live process already uses this
// instance name (it wraps leadership.ErrDuplicateInstance).
type DuplicateInstanceError struct {
	Instance string
	Existing leadership.Registration
	SameHost bool
}

func (e *DuplicateInstanceError) Unwrap() error { return leadership.ErrDuplicateInstance }

func (e *DuplicateInstanceError) Error() string {
	if e.SameHost {
		return fmt.Sprintf("leadership: instance %q is already running on this host as pid %d (since %s); "+
			"stop it first, or give this process another instance name",
			e.Instance, e.Existing.PID, e.Existing.Started.Format(time.RFC3339))
	}
	return fmt.Sprintf("leadership: instance name %q is registered by host %q (pid %d, since %s); "+
		"every server needs its own instance name. If %q is gone, its registration expires with its lease",
		e.Instance, e.Existing.Host, e.Existing.PID, e.Existing.Started.Format(time.RFC3339), e.Existing.Host)
}

// maxRegisterAttempts bounds the create / reclaim / create loop against a
// registration that keeps reappearing (a race with another starting process).
const maxRegisterAttempts = 5

// register writes this instance's registration on the lease (create-if-absent).
// A registration left on a lease this session held before is replaced. One left
// by a dead process of this instance on this host is reclaimed: its lease is
// revoked, which also deletes its leader keys, so its jobs move at once instead of
// after a TTL. Anything else is a DuplicateInstanceError.
func (h *lease) register(ctx context.Context) error {
	cfg := h.st.cfg
	key := layout.InstanceKey(cfg.Prefix, cfg.Instance)
	p := leadership.ThisProcess(cfg.Host)
	me, err := json.Marshal(record{
		Instance: cfg.Instance, Host: p.Host, PID: p.PID, Started: p.Since(),
		ProcStart: p.Start, PIDNS: p.PIDNamespace, Lease: int64(h.id),
	})
	if err != nil {
		return err
	}
	for range maxRegisterAttempts {
		resp, err := cfg.Client.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, string(me), clientv3.WithLease(h.id))).
			Else(clientv3.OpGet(key)).
			Commit()
		if err != nil {
			return fmt.Errorf("register instance %q: %w", cfg.Instance, err)
		}
		if resp.Succeeded {
			return nil
		}
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			continue // deleted in between
		}
		kv := kvs[0]
		old := clientv3.LeaseID(kv.Lease)
		if old == h.id {
			return nil // our own write, whose answer we lost
		}
		var prev record
		if err := json.Unmarshal(kv.Value, &prev); err != nil {
			return fmt.Errorf("register instance %q: unreadable registration at %s: %w", cfg.Instance, key, err)
		}
		reg := prev.registration()
		gone := reg.Gone(cfg.Host)
		switch {
		case h.l.HeldBefore(leaseID(old)):
			// Left by this session's previous lease, which it could not
			// revoke: one it held, or one whose registration's answer was
			// lost (the write landed all the same).
		case errors.Is(gone, leadership.ErrOtherHost):
			return &DuplicateInstanceError{Instance: cfg.Instance, Existing: reg}
		case gone != nil:
			return &DuplicateInstanceError{Instance: cfg.Instance, Existing: reg, SameHost: true}
		default:
			h.st.log.Info("predecessor process is gone; revoking its lease so its jobs move now",
				"pid", prev.PID, "lease", leaseID(old), "since", prev.Started)
			h.l.Reclaimed()
		}
		if err := h.st.revoke(ctx, old); err != nil {
			return fmt.Errorf("register instance %q: revoke lease %x of the previous registration: %w", cfg.Instance, kv.Lease, err)
		}
	}
	return fmt.Errorf("register instance %q: registration keeps reappearing; is another process starting with this name?", cfg.Instance)
}

// Deregister removes this instance's registration while keeping its lease and
// terms: peers stop counting it as up. A later lease registers again.
func (h *lease) Deregister(ctx context.Context) error {
	key := layout.InstanceKey(h.st.cfg.Prefix, h.st.cfg.Instance)
	_, err := h.st.cfg.Client.Txn(ctx).
		If(clientv3.Compare(clientv3.LeaseValue(key), "=", h.id)).
		Then(clientv3.OpDelete(key)).
		Commit()
	return err
}
