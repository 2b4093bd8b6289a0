package chaos

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"syscall"
	"time"

	"github.com/snip/snip-jobs/internal/sleep"
)

// Kind is a kind of fault.
type Kind string

// The faults. Each is injected, held, healed, and followed by a wait until the
// cluster has settled (every instance ready, every job led, the probe written
// by its current term) before the next one.
const (
	// KillLeader SIGKILLs the leader of a random job, waits until every job it
	// led has a new term, then restarts it (the restart of a killed instance).
	KillLeader Kind = "kill-leader"
	// KillLeaderReclaim SIGKILLs the leader of a random job and, once the
	// process has exited, runs `snip-jobs reclaim` for it, as systemd's
	// ExecStopPost= does: the death reclaim, which moves the jobs without
	// waiting for the lease to expire and without a restart. The instance is
	// restarted once every job it led has a new term.
	KillLeaderReclaim Kind = "kill-leader-reclaim"
	// PauseLeader SIGSTOPs the leader of a random job for TTL + 1.5 s, then
	// SIGCONTs it.
	PauseLeader Kind = "pause-leader"
	// PartitionLeader cuts the leader of a random job off from every etcd
	// member (its fault proxies drop all traffic) for TTL + 1.5 s. Its
	// database link stays up.
	PartitionLeader Kind = "partition-leader"
	// PartitionSlowDB adds latency (1.55 s each way at TTL 2 s; slowLink) to
	// the probe leader's PostgreSQL link and cuts it off from etcd the moment
	// one of its probe transactions has run its INSERT, for 2 TTL + 1 s, the
	// link slower still from the cut: a leader whose COMMIT, if sent while its
	// term still looked valid, reaches the database after its successor's write.
	PartitionSlowDB Kind = "partition-slow-db"
	// EtcdMemberLoss SIGKILLs an etcd member that is not the raft leader for
	// 2 s, then restarts it.
	EtcdMemberLoss Kind = "etcd-member-loss"
	// EtcdLeaderLoss SIGKILLs the etcd raft leader for 2 s, then restarts it.
	EtcdLeaderLoss Kind = "etcd-leader-loss"
	// QuorumLoss SIGKILLs two of the three etcd members for TTL + 2 s, then
	// restarts them.
	QuorumLoss Kind = "etcd-quorum-loss"
	// FollowersLoss SIGKILLs both etcd followers for TTL + 2 s, then restarts
	// them. The raft leader keeps running alone: it may answer keep-alives
	// until check-quorum makes it step down (about an election timeout), so
	// terms may be renewed after the loss began; they must still end before
	// any successor starts, and their writes stop TTL after the step-down.
	FollowersLoss Kind = "etcd-followers-loss"
	// PostgresRestart stops PostgreSQL (fast shutdown: open transactions are
	// aborted) and starts it again after 1 s.
	PostgresRestart Kind = "postgres-restart"
	// TermLeader SIGTERMs the leader of a random job (it resigns its terms and
	// exits), then restarts it.
	TermLeader Kind = "sigterm-leader"
	// APIServerRestart (Kubernetes backend only) SIGKILLs the kube-apiserver,
	// starts it again after 1 s and waits until /readyz answers: no renewal
	// succeeds meanwhile, so a restart slower than TTL − margin ends every
	// term (each instance then takes a new instance Lease and campaigns).
	APIServerRestart Kind = "kube-apiserver-restart"
)

// HitsLeader reports whether the fault is aimed at one job's leader (one
// instance), rather than at etcd or PostgreSQL (the whole cluster).
func (k Kind) HitsLeader() bool {
	switch k {
	case KillLeader, KillLeaderReclaim, PauseLeader, PartitionLeader, PartitionSlowDB, TermLeader, Drain:
		return true
	}
	return false
}

// AllKinds is every fault kind of the etcd backend, in the order of the
// results table: the faults of the leaders, of etcd and PostgreSQL, and the
// operators' controls (operator.go). KubeKinds are the Kubernetes backend's.
var AllKinds = []Kind{KillLeader, KillLeaderReclaim, PauseLeader, PartitionLeader, PartitionSlowDB, TermLeader,
	EtcdMemberLoss, EtcdLeaderLoss, QuorumLoss, FollowersLoss, PostgresRestart, OperatorPause, ManualRun, Drain}

// Takeover is one job's change of term caused by a fault.
type Takeover struct {
	Job      string
	From, To int64 // tokens
	// After is from the fault's start (the signal, the cut) to the new term's
	// key appearing in etcd, as the harness's watch saw it.
	After time.Duration
	// KeyGone is from the fault's start to the old key's deletion: its
	// resignation (SIGTERM), or etcd's expiry of the old lease.
	KeyGone time.Duration
	// Handoff is from the old key's deletion to the new key's creation: the
	// successors' campaign, including any spread hold-back.
	Handoff time.Duration
}

// Fault is one injected fault and what followed.
type Fault struct {
	N      int
	Kind   Kind
	Target string // instance or etcd member(s)
	// Led is, for a fault aimed at a leader, the jobs its target led when it
	// was struck.
	Led    []string
	Start  time.Time
	Healed time.Time // the fault removed (process continued or restarted, link restored)
	// Settled is when the cluster was whole again; zero if it was not within
	// the bound (Err says why).
	Settled   time.Time
	Takeovers []Takeover
	// Restart is how long a restarted instance took to become ready.
	Restart time.Duration
	// ExitCode of an instance stopped by SIGTERM.
	ExitCode int
	// Reclaim is, for KillLeaderReclaim, how long `snip-jobs reclaim` took,
	// from its start (after the killed process was reaped) to its exit.
	Reclaim time.Duration
	// TermsEnded is, for etcd faults, how many terms ended on their own
	// side (expired: no keep-alive acknowledged in time; or lease lost)
	// between the fault and the cluster settling, from the instances' logs.
	TermsEnded int
	// LossStart/LossEnd bound a time without etcd quorum (QuorumLoss): from the
	// second member's death until both were back and a leader agreed.
	LossStart, LossEnd time.Time
	// PreLossRevision is etcd's revision just before the quorum loss: no term
	// can carry a higher token until the quorum is back.
	PreLossRevision int64
	// PreLossTokens is, on the Kubernetes backend (whose tokens count per
	// job), each job Lease's token just before the loss: no term of that job
	// can carry a higher one until the quorum is back.
	PreLossTokens map[string]int64 `json:",omitempty"`
	// RestartAt is when the harness started the lost members again: until
	// then only one member of three ran.
	RestartAt time.Time
	// LastWriteAfterLoss is how long after the quorum loss the last probe
	// write of a term granted before it was accepted (the checker fills it).
	LastWriteAfterLoss time.Duration
	// StepDown is, for FollowersLoss, when the isolated raft leader was first
	// seen no longer leading (zero: not seen before the followers were back).
	StepDown time.Time
	// EtcdElection is, for EtcdLeaderLoss, from the kill until the other
	// members agreed on a new raft leader.
	EtcdElection time.Duration
	// NoActing is the longest time during the fault without a probe write
	// (computed by the checker from the database). It says something about
	// leadership only when NoActingMeasured.
	NoActing time.Duration
	// Job is, for OperatorPause and ManualRun, the job paused or run;
	// Controls what the operator's commands did.
	Job      string          `json:",omitempty"`
	Controls *ControlFigures `json:",omitempty"`
	Err      string
}

// StruckProbe reports whether the fault struck the probe's leader: its
// target led the probe when it was struck (for reports written before Led
// was recorded: the probe is among its takeovers).
func (f *Fault) StruckProbe() bool {
	if f.Led != nil {
		return slices.Contains(f.Led, JobProbe)
	}
	return slices.ContainsFunc(f.Takeovers, func(t Takeover) bool { return t.Job == JobProbe })
}

// preLoss is the highest token a term of job granted before the quorum loss
// can carry: the job's own token on the Kubernetes backend, etcd's revision
// on etcd.
func (f *Fault) preLoss(job string) int64 {
	if f.PreLossTokens != nil {
		return f.PreLossTokens[job]
	}
	return f.PreLossRevision
}

// grantedBefore reports whether the store granted job's term token before
// the quorum loss q: its token is no newer than the one read just before the
// loss, or the observer's watch delivered its grant before the lost members
// were started again (nothing commits without a quorum, so a grant seen then
// was committed before the loss). The second covers a term won between that
// read and the kill, which the read alone would call newer.
func (q *Fault) grantedBefore(f *facts, job string, token int64) bool {
	if token <= q.preLoss(job) {
		return true
	}
	e, ok := f.terms[termKey{job, token}]
	return ok && e.At.Before(q.RestartAt)
}

// NoActingMeasured reports whether the fault's NoActing measures a time
// without an acting leader: for a fault aimed at a leader, only if it struck
// the probe's (a gap in the probe's writes says nothing about another job's
// leader); for a fault of etcd or PostgreSQL, always; never for a pause
// (it stops its job on purpose) nor a manual run (which slows the link of its
// job's leader, often the probe's too, before it strikes it).
func (f *Fault) NoActingMeasured() bool {
	if f.Kind == OperatorPause || f.Kind == ManualRun {
		return false
	}
	return !f.Kind.HitsLeader() || f.StruckProbe()
}

// targetJob picks the job whose leader a fault hits: the probe twice as often
// as each other job (with four jobs, 2/5 against 1/5 each). Only a fault that
// strikes the probe's leader measures "no acting leader" (the probe's writes
// are the only steady, precise record of acting). If the four jobs are spread
// 2-1-1 over the three instances, any pair as likely as another to share one,
// an even draw strikes each job's leader in 3 leader faults of 8; this one
// strikes the probe's in 1 of 2 and each other job's in 1 of 3.
func (c *cluster) targetJob(rng *rand.Rand) string {
	if i := rng.IntN(len(c.jobs) + 1); i < len(c.jobs) {
		return c.jobs[i]
	}
	return JobProbe
}

// ledJobs lists the jobs of led, sorted.
func ledJobs(led map[string]int64) []string {
	return slices.Sorted(maps.Keys(led))
}

// ledBy returns the jobs the instance leads now, with their tokens.
func (c *cluster) ledBy(name string) map[string]int64 {
	out := map[string]int64{}
	for j, l := range c.obs.leaders() {
		if l.Instance == name {
			out[j] = l.Token
		}
	}
	return out
}

// inject runs one fault of kind k.
func (c *cluster) inject(ctx context.Context, rng *rand.Rand, n int, k Kind) *Fault {
	f := &Fault{N: n, Kind: k}
	attempted := time.Now()
	var err error
	switch k {
	case KillLeader:
		err = c.killLeader(ctx, rng, f)
	case KillLeaderReclaim:
		err = c.killLeaderReclaim(ctx, rng, f)
	case PauseLeader:
		err = c.pauseLeader(ctx, rng, f)
	case PartitionLeader:
		err = c.partitionLeader(ctx, rng, f, false)
	case PartitionSlowDB:
		err = c.partitionLeader(ctx, rng, f, true)
	case TermLeader:
		err = c.termLeader(ctx, rng, f)
	case EtcdMemberLoss, EtcdLeaderLoss:
		err = c.memberLoss(ctx, rng, f, k == EtcdLeaderLoss)
	case QuorumLoss:
		err = c.quorumLoss(ctx, rng, f)
	case FollowersLoss:
		err = c.followersLoss(ctx, f)
	case PostgresRestart:
		err = c.postgresRestart(ctx, f)
	case APIServerRestart:
		err = c.apiserverRestart(ctx, f)
	case OperatorPause:
		err = c.operatorPause(ctx, rng, f)
	case ManualRun:
		err = c.manualRun(ctx, rng, f)
	case Drain:
		err = c.drain(ctx, rng, f)
	default:
		err = fmt.Errorf("unknown fault kind %q", k)
	}
	if err != nil {
		f.Err = err.Error()
	}
	if f.Start.IsZero() {
		f.Start = attempted
	}
	if f.Healed.IsZero() {
		f.Healed = time.Now()
	}
	if err := c.settle(ctx, f.Healed); err != nil {
		f.Err = joinErr(f.Err, err.Error())
	} else {
		f.Settled = time.Now()
	}
	return f
}

func joinErr(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// takeovers waits (up to bound) until each job in led has a term other than
// its token, and records when each appeared.
func (c *cluster) takeovers(ctx context.Context, f *Fault, led map[string]int64, bound time.Duration) error {
	ok := c.obs.waitFor(ctx, bound, func(ls map[string]leader) bool {
		for j, tok := range led {
			if l, has := ls[j]; !has || l.Token == tok {
				return false
			}
		}
		return true
	})
	jobs := make([]string, 0, len(led))
	for j := range led {
		jobs = append(jobs, j)
	}
	slices.Sort(jobs)
	for _, j := range jobs {
		e, found := c.obs.firstStartAfter(j, f.Start, led[j])
		if !found {
			continue
		}
		t := Takeover{Job: j, From: led[j], To: e.Token, After: e.At.Sub(f.Start)}
		if end, ok := c.obs.endOf(j, led[j]); ok {
			t.KeyGone, t.Handoff = end.At.Sub(f.Start), e.At.Sub(end.At)
		}
		f.Takeovers = append(f.Takeovers, t)
	}
	if !ok {
		return fmt.Errorf("not every job of %s had a new term within %v", f.Target, bound)
	}
	return nil
}

// leaderOf returns the instance leading job (waiting briefly for one).
func (c *cluster) leaderOf(ctx context.Context, job string) (*instance, error) {
	var name string
	c.obs.waitFor(ctx, 10*time.Second, func(ls map[string]leader) bool {
		name = ls[job].Instance
		return name != ""
	})
	in := c.instance(name)
	if in == nil {
		return nil, fmt.Errorf("%s: %w", job, errNoLeader)
	}
	return in, nil
}

func (c *cluster) restart(ctx context.Context, f *Fault, in *instance) error {
	begin := time.Now()
	if err := in.start(); err != nil {
		return err
	}
	f.Healed = time.Now()
	bctx, cancel := context.WithTimeout(ctx, readyBound)
	defer cancel()
	for !in.ready(bctx) {
		if bctx.Err() != nil {
			return fmt.Errorf("%s not ready within %v of its restart", in.name, readyBound)
		}
		time.Sleep(20 * time.Millisecond)
	}
	f.Restart = time.Since(begin)
	return nil
}

// strikeLeader picks the leader of a random job as the fault's target, notes
// the jobs it leads (job → token), and marks the fault's start: the opening of every fault
// aimed at a leader.
func (c *cluster) strikeLeader(ctx context.Context, rng *rand.Rand, f *Fault) (*instance, map[string]int64, error) {
	in, err := c.leaderOf(ctx, c.targetJob(rng))
	if err != nil {
		return nil, nil, err
	}
	f.Target = in.name
	led := c.ledBy(in.name)
	f.Led = ledJobs(led)
	f.Start = time.Now()
	return in, led, nil
}

func (c *cluster) killLeader(ctx context.Context, rng *rand.Rand, f *Fault) error {
	in, led, err := c.strikeLeader(ctx, rng, f)
	if err != nil {
		return err
	}
	if err := in.signal(syscall.SIGKILL); err != nil {
		return err
	}
	in.wait(10 * time.Second)
	err = c.takeovers(ctx, f, led, 3*c.opts.TTL+10*time.Second)
	return joinErrs(err, c.restart(ctx, f, in))
}

// killLeaderReclaim is killLeader with systemd's ExecStopPost= between the
// death and the takeover: `snip-jobs reclaim` run once the process is reaped.
func (c *cluster) killLeaderReclaim(ctx context.Context, rng *rand.Rand, f *Fault) error {
	in, led, err := c.strikeLeader(ctx, rng, f)
	if err != nil {
		return err
	}
	if err := in.signal(syscall.SIGKILL); err != nil {
		return err
	}
	in.wait(10 * time.Second)
	begin := time.Now()
	err = in.reclaim(ctx, "SERVICE_RESULT=signal", "EXIT_CODE=killed", "EXIT_STATUS=KILL")
	f.Reclaim = time.Since(begin)
	err = joinErrs(err, c.takeovers(ctx, f, led, 3*c.opts.TTL+10*time.Second))
	return joinErrs(err, c.restart(ctx, f, in))
}

func (c *cluster) pauseLeader(ctx context.Context, rng *rand.Rand, f *Fault) error {
	in, led, err := c.strikeLeader(ctx, rng, f)
	if err != nil {
		return err
	}
	if err := in.signal(syscall.SIGSTOP); err != nil {
		return err
	}
	sleep.For(ctx, c.opts.TTL+1500*time.Millisecond)
	if err := in.signal(syscall.SIGCONT); err != nil {
		return err
	}
	f.Healed = time.Now()
	return c.takeovers(ctx, f, led, 3*c.opts.TTL+10*time.Second)
}

func (c *cluster) partitionLeader(ctx context.Context, rng *rand.Rand, f *Fault, slowDB bool) error {
	job := c.targetJob(rng)
	if slowDB {
		job = JobProbe
	}
	in, err := c.leaderOf(ctx, job)
	if err != nil {
		return err
	}
	f.Target = in.name
	hold := c.opts.TTL + 1500*time.Millisecond
	if slowDB {
		if in, err = c.slowProbeLeader(ctx); err != nil {
			return err
		}
		f.Target = in.name
		hold = 2*c.opts.TTL + time.Second
	}
	led := c.ledBy(in.name)
	f.Led = ledJobs(led)
	f.Start = time.Now()
	in.partition(true)
	if slowDB {
		_, after := c.opts.slowLink()
		in.db.SetDelay(after) // the INSERT's answer keeps its latency; the COMMIT gets this one
	}
	sleep.For(ctx, hold)
	in.partition(false)
	in.db.SetDelay(0)
	f.Healed = time.Now()
	return c.takeovers(ctx, f, led, 3*c.opts.TTL+10*time.Second)
}

func (c *cluster) termLeader(ctx context.Context, rng *rand.Rand, f *Fault) error {
	in, led, err := c.strikeLeader(ctx, rng, f)
	if err != nil {
		return err
	}
	if err := in.signal(syscall.SIGTERM); err != nil {
		return err
	}
	err = c.takeovers(ctx, f, led, 3*c.opts.TTL+10*time.Second)
	if !in.wait(30 * time.Second) {
		err = joinErrs(err, fmt.Errorf("%s did not exit within 30 s of SIGTERM", in.name))
	}
	f.ExitCode = lastExit(in)
	return joinErrs(err, c.restart(ctx, f, in))
}
