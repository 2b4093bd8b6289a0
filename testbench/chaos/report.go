package chaos

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Dist is a distribution's summary.
type Dist struct {
	N             int
	P50, P99, Max time.Duration
}

func dist(ds []time.Duration) Dist {
	if len(ds) == 0 {
		return Dist{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(q float64) time.Duration {
		i := int(q*float64(len(s))+0.999999) - 1 // nearest rank
		return s[min(max(i, 0), len(s)-1)]
	}
	return Dist{N: len(s), P50: at(0.50), P99: at(0.99), Max: s[len(s)-1]}
}

func (d Dist) String() string {
	if d.N == 0 {
		return "–"
	}
	r := func(x time.Duration) string { return x.Round(time.Millisecond).String() }
	return fmt.Sprintf("%s / %s / %s", r(d.P50), r(d.P99), r(d.Max))
}

// KindStats is the figures of one fault kind.
type KindStats struct {
	Kind   Kind
	Faults int
	// NoActing is the longest time without an accepted probe write, over the
	// faults where it measures one (Fault.NoActingMeasured): NoActing.N of
	// them.
	NoActing  Dist
	Takeover  Dist // fault start → new term, per job whose leader was hit
	KeyGone   Dist // fault start → old leader key deleted (resigned or expired)
	Handoff   Dist // old key deleted → new term, per job
	Restart   Dist // restarted instance → ready
	Election  Dist // etcd leader loss: kill → new raft leader
	AfterLoss Dist // quorum or followers loss: loss → last accepted write of an old term
	StepDown  Dist // followers loss: loss → the isolated etcd leader stepped down
	Reclaim   Dist // kill-leader-reclaim: `snip-jobs reclaim`'s run
	// TermsEnded is, for etcd member and leader losses and kube-apiserver
	// restarts, the terms that ended
	// on their own side (expired, lease lost) during the faults, in all.
	TermsEnded int
	// Controls is the figures of the operators' controls' kinds.
	Controls ControlKindStats
}

// ByKind computes the figures of each fault kind that occurred.
func (r *Report) ByKind() []KindStats {
	var out []KindStats
	for _, k := range append(slices.Clone(r.Options.Backend.Kinds()), UpgradeRestart) {
		var s KindStats
		var ctl controlAcc
		var noActing, takeover, gone, handoff, restart, election, after, stepDown, reclaim []time.Duration
		for _, f := range r.Faults {
			if f.Kind != k {
				continue
			}
			s.Faults++
			if f.NoActingMeasured() {
				noActing = append(noActing, f.NoActing)
			}
			for _, t := range f.Takeovers {
				takeover = append(takeover, t.After)
				if t.KeyGone > 0 {
					gone = append(gone, t.KeyGone)
					handoff = append(handoff, t.Handoff)
				}
			}
			if f.Restart > 0 {
				restart = append(restart, f.Restart)
			}
			if f.EtcdElection > 0 {
				election = append(election, f.EtcdElection)
			}
			if k == QuorumLoss || k == FollowersLoss {
				after = append(after, f.LastWriteAfterLoss)
			}
			if !f.StepDown.IsZero() {
				stepDown = append(stepDown, f.StepDown.Sub(f.LossStart))
			}
			if f.Reclaim > 0 {
				reclaim = append(reclaim, f.Reclaim)
			}
			s.TermsEnded += f.TermsEnded
			ctl.add(f)
		}
		if s.Faults == 0 {
			continue
		}
		s.Kind, s.Controls = k, ctl.stats()
		s.NoActing, s.Takeover, s.KeyGone, s.Handoff, s.Restart, s.Election, s.AfterLoss, s.StepDown, s.Reclaim =
			dist(noActing), dist(takeover), dist(gone), dist(handoff), dist(restart), dist(election), dist(after), dist(stepDown), dist(reclaim)
		out = append(out, s)
	}
	return out
}

// Struck counts, per job, the faults aimed at a leader whose target led that
// job when it was struck (nil when the report does not record it).
func (r *Report) Struck() map[string]int {
	var out map[string]int
	for _, f := range r.Faults {
		if !f.Kind.HitsLeader() || f.Led == nil {
			continue
		}
		if out == nil {
			out = map[string]int{}
		}
		for _, j := range f.Led {
			out[j]++
		}
	}
	return out
}

// ViolationCounts counts violations by invariant, every invariant listed.
func (r *Report) ViolationCounts() map[string]int {
	out := map[string]int{}
	for _, inv := range Invariants {
		out[inv] = 0
	}
	for _, v := range r.Violations {
		out[v.Invariant]++
	}
	return out
}

// store names the run's store, after the jobs in the report's first line.
func (r *Report) store() string {
	if r.Options.Backend == BackendKubernetes {
		store := "an etcd of its own" // reports from before it ran over the harness's members lack their version
		if r.EtcdVersion != "" {
			store = "etcd " + r.EtcdVersion + " (three members, TLS, authentication by a client certificate)"
		}
		return "; Kubernetes backend: Leases on kube-apiserver " + r.KubeVersion + " (HTTPS, bearer token) over " + store
	}
	if r.EtcdVersion != "" { // reports written before the version was recorded lack it
		return "; etcd " + r.EtcdVersion + " over TLS with authentication"
	}
	return ""
}

// figuresNote says what the figures per fault kind measure.
func (r *Report) figuresNote() string {
	var b strings.Builder
	b.WriteString("\nFigures per fault kind, p50 / p99 / max. *No acting leader*: the longest time without an accepted probe write " +
		"(the probe writes every second, the lowest `every` allowed) from the last write before the fault (for partition-slow-db, from the cut: its slowed link " +
		"spaces the leader's writes before it) until the cluster settled; for a fault aimed at a leader, only over the faults whose " +
		"target led the probe (the other jobs' leaders have no steady record of acting), for etcd and PostgreSQL faults over all; " +
		"in brackets, how many faults it was measured over. *New term*: from the fault " +
		"(signal, cut, kill) to the successor's leader key in etcd, for every job the target led.\n\n")
	b.WriteString("*Key gone*: fault → the old leader key deleted (resigned, or its lease expired at etcd). *Handoff*: key deleted → " +
		"new key created (the successors' campaign, including the scheduler's spread hold-back).\n\n")
	if r.Options.Backend != BackendKubernetes {
		return b.String()
	}
	b.WriteString("On the Kubernetes backend, etcd's leader key is the job's Lease and its token annotation: *new term* is the " +
		"Lease naming the successor with a higher token; a Lease never expires at the API server, so the old term's key is " +
		"gone when the successor writes the Lease (handoff 0), unless its holder resigned (holder cleared). ")
	if r.EtcdVersion == "" {
		b.WriteString("The invariants that name etcd read \"the API server\"; the quorum's has no fault to check on this backend.\n\n")
	} else {
		b.WriteString("The invariants that name etcd read \"the API server\", but for the quorum's: etcd's members beneath it, " +
			"which the etcd faults strike (a term's token is its job's, read from the job Leases just before the loss).\n\n")
	}
	return b.String()
}

// other is the kind's "other" column: the figures only some kinds have.
func (s KindStats) other() string {
	var other []string
	if s.Restart.N > 0 {
		other = append(other, "restart → ready "+s.Restart.String())
	}
	if s.Election.N > 0 {
		other = append(other, "new etcd leader "+s.Election.String())
	}
	if s.StepDown.N > 0 {
		other = append(other, "isolated etcd leader stepped down after "+s.StepDown.String())
	}
	if s.AfterLoss.N > 0 {
		other = append(other, "last write of an old term after the loss "+s.AfterLoss.String())
	}
	if s.Reclaim.N > 0 {
		other = append(other, "`snip-jobs reclaim` ran "+s.Reclaim.String())
	}
	if s.Kind == EtcdLeaderLoss || s.Kind == EtcdMemberLoss || s.Kind == APIServerRestart {
		other = append(other, fmt.Sprintf("terms ended by the instances (expired, lease lost): %d", s.TermsEnded))
	}
	other = append(other, s.controlsOther()...)
	return strings.Join(other, "; ")
}

// Markdown renders the report: the invariants, the figures per fault kind, and
// the first violations in full.
func (r *Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d faults in %v (seed %d, TTL %v, margin %v, renew interval %v, broken build: %v); jobs: %s%s.\n\n",
		len(r.Faults), r.Duration.Round(time.Second), r.Seed, r.Options.TTL, r.Options.margin(), r.Options.renewInterval(), r.Options.brokenLabel(),
		strings.Join(r.Jobs, ", "), r.store())
	b.WriteString("| invariant | violations |\n|---|---|\n")
	counts := r.ViolationCounts()
	for _, inv := range Invariants {
		note := ""
		if inv == InvCounts && r.Counts == nil || uncheckedIn(r, inv) {
			note = " (not checked)"
		}
		fmt.Fprintf(&b, "| %s%s | %d |\n", inv, note, counts[inv])
	}
	b.WriteString(r.figuresNote())
	b.WriteString("| fault | n | no acting leader (faults measured) | new term after | key gone after | handoff | other |\n|---|---|---|---|---|---|---|\n")
	for _, s := range r.ByKind() {
		fmt.Fprintf(&b, "| %s | %d | %s (%d) | %s | %s | %s | %s |\n", s.Kind, s.Faults, s.NoActing, s.NoActing.N, s.Takeover, s.KeyGone, s.Handoff, s.other())
	}
	if struck := r.Struck(); len(struck) > 0 {
		var parts []string
		for _, job := range r.Jobs {
			parts = append(parts, fmt.Sprintf("%s %d", job, struck[job]))
		}
		fmt.Fprintf(&b, "\nLeaders struck (faults aimed at a leader whose target led the job): %s.\n", strings.Join(parts, ", "))
	}
	fmt.Fprintf(&b, "\nProbe: %d writes accepted from %d terms; %d terms granted in all; %d fenced writes refused.\n",
		r.Probe.Writes, r.Probe.Terms, r.Probe.TermsAll, r.Probe.Rejections)
	for _, w := range r.Writes {
		fmt.Fprintf(&b, "%s: %d token-carrying writes in %d transactions from %d terms, checked in commit order.\n", w.Job, w.Writes, w.Transactions, w.Terms)
	}
	if r.Counts != nil {
		fmt.Fprintf(&b, "Clicks: %d valid and %d invalid events committed; %d counted, %d rejected.\n",
			r.Counts.Valid, r.Counts.Invalid, r.Counts.Counted, r.Counts.Rejected)
	}
	fmt.Fprintf(&b, "Weekly report: %d report(s), %d slots done, %d skipped, %d open.\n",
		r.Reports.Reports, r.Reports.SlotsDone, r.Reports.SlotsSkipped, r.Reports.SlotsOpen)
	fmt.Fprintf(&b, "Certificates: %d stored for %d domains (%d of them by a later term than the one the CA issued them to); the CA issued %d (%d beyond one per domain); %d domains older than a minute without one.\n",
		r.Certs.Stored, r.Certs.Domains, r.Certs.Recovered, r.Certs.Issued, r.Certs.DuplicateIssued, r.Certs.WithoutAfter60s)
	b.WriteString(r.controlsLine())
	if len(r.Certs.Unstored) > 0 {
		fmt.Fprintf(&b, "Issued by the CA and not stored: %s.\n", strings.Join(r.Certs.Unstored, ", "))
	}
	b.WriteString("Grace overruns (a run still going after its term's end + grace, from the instances' logs): ")
	if len(r.Overruns) == 0 {
		b.WriteString("none.\n")
	} else {
		var parts []string
		for _, job := range slices.Sorted(maps.Keys(r.Overruns)) {
			parts = append(parts, fmt.Sprintf("%s %d", job, r.Overruns[job]))
		}
		b.WriteString(strings.Join(parts, ", ") + ".\n")
	}
	if len(r.Violations) > 0 {
		b.WriteString("\nViolations (first 20):\n\n")
		for i, v := range r.Violations {
			if i == 20 {
				break
			}
			fmt.Fprintf(&b, "- %s: %s\n", v.Invariant, v.Detail)
		}
	}
	return b.String()
}
