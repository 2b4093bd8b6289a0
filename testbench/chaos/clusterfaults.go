package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/snip/snip-jobs/internal/sleep"
	"github.com/snip/snip-jobs/leadership"
)

func (c *cluster) memberLoss(ctx context.Context, rng *rand.Rand, f *Fault, leaderToo bool) error {
	lead, err := c.etcd.waitLeader(ctx, readyBound)
	if err != nil {
		return err
	}
	victim := lead
	if !leaderToo {
		victim = (lead + 1 + rng.IntN(2)) % 3
	}
	m := c.etcd.members[victim]
	f.Target = m.name
	f.Start = time.Now()
	m.kill()
	if leaderToo {
		if _, err := c.etcd.waitLeader(ctx, readyBound); err == nil {
			f.EtcdElection = time.Since(f.Start)
		}
	}
	sleep.Until(ctx, f.Start.Add(2*time.Second))
	err = c.etcd.startMembers(ctx, "existing", m)
	f.Healed = time.Now()
	return err
}

func (c *cluster) quorumLoss(ctx context.Context, rng *rand.Rand, f *Fault) error {
	lead, err := c.etcd.waitLeader(ctx, readyBound)
	if err != nil {
		return err
	}
	other := (lead + 1 + rng.IntN(2)) % 3
	a, b := c.etcd.members[lead], c.etcd.members[other]
	f.Target = a.name + "+" + b.name
	if err := c.beforeLoss(ctx, f); err != nil {
		return err
	}
	f.Start = time.Now()
	a.kill()
	b.kill()
	f.LossStart = time.Now()
	sleep.For(ctx, c.opts.TTL+2*time.Second)
	f.RestartAt = time.Now()
	err = c.etcd.startMembers(ctx, "existing", a, b)
	if err == nil {
		_, err = c.etcd.waitLeader(ctx, readyBound)
	}
	f.LossEnd = time.Now()
	f.Healed = f.LossEnd
	return err
}

// beforeLoss records, just before a quorum loss, the highest token a term
// granted before it can carry: etcd's revision, and on the Kubernetes
// backend each job Lease's token.
func (c *cluster) beforeLoss(ctx context.Context, f *Fault) error {
	rctx, cancel := context.WithTimeout(ctx, etcdOpTimeout)
	resp, err := c.etcd.cli.Get(rctx, "/snip-chaos-revision")
	cancel()
	if err != nil {
		return fmt.Errorf("read etcd's revision: %w", err)
	}
	f.PreLossRevision = resp.Header.Revision
	if c.kube != nil {
		if f.PreLossTokens, err = c.kube.jobTokens(ctx); err != nil {
			return fmt.Errorf("read the job Leases' tokens: %w", err)
		}
	}
	return nil
}

func (c *cluster) followersLoss(ctx context.Context, f *Fault) error {
	lead, err := c.etcd.waitLeader(ctx, readyBound)
	if err != nil {
		return err
	}
	a, b := c.etcd.members[(lead+1)%3], c.etcd.members[(lead+2)%3]
	leader := c.etcd.members[lead]
	f.Target = a.name + "+" + b.name
	if err := c.beforeLoss(ctx, f); err != nil {
		return err
	}
	f.Start = time.Now()
	a.kill()
	b.kill()
	f.LossStart = time.Now()
	hold := time.NewTimer(c.opts.TTL + 2*time.Second)
	defer hold.Stop()
	f.StepDown = c.etcd.waitStepDown(ctx, leader, hold.C)
	select {
	case <-hold.C:
	case <-ctx.Done():
	}
	f.RestartAt = time.Now()
	err = c.etcd.startMembers(ctx, "existing", a, b)
	if err == nil {
		_, err = c.etcd.waitLeader(ctx, readyBound)
	}
	f.LossEnd = time.Now()
	f.Healed = f.LossEnd
	return err
}

func (c *cluster) postgresRestart(ctx context.Context, f *Fault) error {
	f.Target = "postgresql"
	f.Start = time.Now()
	if err := c.pg.Stop(); err != nil {
		return err
	}
	sleep.For(ctx, time.Second)
	err := c.pg.Start(ctx)
	f.Healed = time.Now()
	return err
}

// termsEnded counts, for each etcd fault and each restart of the
// kube-apiserver, the terms that ended on their own side (expired: no
// keep-alive acknowledged in time; or their lease lost) between the fault and
// the cluster settling, from the instances' logs. etcd keeps every lease
// through a member's or its leader's loss (a new leader extends them all), so
// each is a term ended for nothing; a kube-apiserver down for longer than
// TTL − margin ends every term.
func termsEnded(instances []*instance, faults []*Fault) {
	var ends []time.Time
	for _, in := range instances {
		for line := range strings.Lines(in.logs()) {
			var e struct {
				Time        time.Time
				Msg, Reason string
			}
			if json.Unmarshal([]byte(line), &e) == nil && e.Msg == "term ended" &&
				(e.Reason == string(leadership.ReasonExpired) || e.Reason == string(leadership.ReasonLeaseLost)) {
				ends = append(ends, e.Time)
			}
		}
	}
	for _, f := range faults {
		if f.Kind != EtcdLeaderLoss && f.Kind != EtcdMemberLoss && f.Kind != APIServerRestart {
			continue
		}
		until := f.Settled
		if until.IsZero() {
			until = f.Healed.Add(readyBound)
		}
		for _, t := range ends {
			if !t.Before(f.Start) && !t.After(until) {
				f.TermsEnded++
			}
		}
	}
}
