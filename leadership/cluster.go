package leadership

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/snip/snip-jobs/internal/sleep"
)

// Cluster is a backend seen from outside any session: what an operator's
// command (snip-jobs resign, reclaim, report rebuild) reads and asks of it.
// Resign and Reclaim are the operations built on it; each backend returns
// one (etcdlease.NewCluster, kubelease.NewCluster).
type Cluster interface {
	// Leader reads job's leader; ok is false when nobody leads it.
	Leader(ctx context.Context, job string) (_ Leader, ok bool, _ error)
	// RequestResign asks the term of job with token to hand over; the
	// leader's session sees it (Session.WatchResignRequests). Naming the
	// token keeps a request from ending a later term.
	RequestResign(ctx context.Context, job string, token int64) error
	// Registration reads instance's registration: the process whose lease
	// it sits on. ok is false when there is none (the process released its
	// lease on its way out, or the lease ended).
	Registration(ctx context.Context, instance string) (_ Registration, ok bool, _ error)
	// Revoke ends the lease reg sits on, if reg is still the instance's
	// registration: the records of that lease's terms go with it, so that
	// peers win its jobs at once. Only for a process proven gone (Reclaim).
	Revoke(ctx context.Context, reg Registration) error
	// FreshToken returns a fencing token larger than that of every term of
	// job granted so far, and smaller than every later term's: for an
	// operator's one-off fenced write (rebuilding a report), which the
	// fence then holds against the current leader's later writes, so that it
	// hands over and wins again with a newer token.
	FreshToken(ctx context.Context, job string) (int64, error)
	// TakeOver ends the term of job with token in the store, if its record
	// is still that term's (a precondition on the record, in the same
	// write), so that a waiting candidate wins at once: the holder's
	// session, if it lives, ends the term with ReasonTakenOver when it sees
	// the record; its lease and its other terms are untouched. taken is
	// false when the record names another term or none. The holder may
	// still be running the job: only for a job whose every effect goes
	// through the fence, which refuses the old token once the successor has
	// written. by names who took it, for the holder's log.
	TakeOver(ctx context.Context, job string, token int64, by string) (taken bool, _ error)
}

// Leader is the holder of a job's term, as its store records it.
type Leader struct {
	Job      string
	Instance string
	Host     string
	PID      int
	Token    int64
	Since    time.Time // the winner's wall clock when it won, for people
}

// Registration is what an instance records beside its lease, so that peers
// and operators see who is up, and a process of its host can tell whether
// the one that wrote it still runs.
type Registration struct {
	Instance string
	Process
	Started time.Time // wall clock, for people; never compared
	// Lease names the lease it sits on, as its store does (Held.ID).
	Lease string
}

// ErrNoLeader is returned by Resign when the job has no leader.
var ErrNoLeader = errors.New("the job has no leader")

// Resign asks the current leader of job to hand over and waits until another
// term holds the job, or ctx ends: then after is nil with no error when nobody
// leads it (handed over, not taken yet, as when no other instance is
// campaigning), and an error when the same term still does. It returns the
// leader before and after.
func Resign(ctx context.Context, c Cluster, job string) (before Leader, after *Leader, err error) {
	before, ok, err := c.Leader(ctx, job)
	if err != nil {
		return before, nil, fmt.Errorf("resign %s: %w", job, err)
	}
	if !ok {
		return before, nil, fmt.Errorf("resign %s: %w", job, ErrNoLeader)
	}
	if err := c.RequestResign(ctx, job, before.Token); err != nil {
		return before, nil, fmt.Errorf("resign %s: %w", job, err)
	}
	for {
		l, ok, err := c.Leader(ctx, job)
		switch {
		case err != nil && ctx.Err() == nil:
			return before, nil, fmt.Errorf("resign %s: %w", job, err)
		case ok && l.Token != before.Token:
			return before, &l, nil
		}
		if !sleep.For(ctx, 50*time.Millisecond) {
			if !ok && err == nil {
				return before, nil, nil
			}
			return before, nil, fmt.Errorf("resign %s: the leader (%s, token %d) did not hand over: %w", job, before.Instance, before.Token, ctx.Err())
		}
	}
}

// Reclaimed is what Reclaim found and did.
type Reclaimed struct {
	// Found: a registration of the instance was there; Registration is it.
	Found        bool
	Registration Registration
	// Revoked: its process was proven gone and its lease ended (or the
	// store no longer had it).
	Revoked bool
}

// Reclaim is death reclaim: when a process that holds terms dies and its host
// lives, the host knows at once that it is gone, where peers would wait out
// its lease. A supervisor on that host (systemd's ExecStopPost=, snip-dev, the
// fault harness) calls Reclaim once it has seen the process exit: if
// instance's registration was written by a process of this host (host: the
// name its session was given, by default os.Hostname) that is no longer
// running, Reclaim has the store revoke the lease it sits on, and its jobs
// move at once. No registration (the process released its lease on its way
// out, or the lease ended) is nothing to do. A registration by a process
// that runs, by another host, or from another PID namespace is refused
// (ErrStillRunning, ErrOtherHost, ErrOtherPIDNamespace) and left alone.
// docs/safety.md gives the argument.
//
// before, if given, runs once the process is proven gone and before its
// lease is ended: what else of the dead process must be gone first (an exec
// job's programs: see jobs/execjob/supervisor.WaitGone). Its error stops the
// reclaim; the lease then expires on its own.
func Reclaim(ctx context.Context, c Cluster, instance, host string, before ...func(context.Context, Registration) error) (Reclaimed, error) {
	if err := CheckName("instance", instance); err != nil {
		return Reclaimed{}, err
	}
	if host == "" {
		h, err := os.Hostname()
		if err != nil {
			return Reclaimed{}, fmt.Errorf("leadership: reclaim %s: the host name is unknown: %w", instance, err)
		}
		host = h
	}
	reg, ok, err := c.Registration(ctx, instance)
	if err != nil || !ok {
		return Reclaimed{}, err
	}
	out := Reclaimed{Found: true, Registration: reg}
	if err := reg.Gone(host); err != nil {
		return out, fmt.Errorf("instance %s: %w", instance, err)
	}
	for _, f := range before {
		if err := f(ctx, reg); err != nil {
			return out, fmt.Errorf("leadership: reclaim %s: %w", instance, err)
		}
	}
	if err := c.Revoke(ctx, reg); err != nil {
		return out, fmt.Errorf("leadership: reclaim %s: end lease %s of dead pid %d: %w", instance, reg.Lease, reg.PID, err)
	}
	out.Revoked = true
	return out, nil
}
