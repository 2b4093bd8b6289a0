package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"time"

	"github.com/snip/snip-jobs/internal/sleep"
	"github.com/snip/snip-jobs/testbench/childproc"
)

// UpgradeRestart is a step of Upgrade: one server stopped (SIGTERM) and
// started again with the new binary. It is not drawn by Run.
const UpgradeRestart Kind = "upgrade-restart"

// UpgradeStats is what an upgrade did to the schema: the highest migration
// applied by the previous release, then by the new binary.
type UpgradeStats struct {
	SchemaBefore, SchemaAfter int64
}

// Upgrade runs a rolling upgrade from the previous release (the snip-jobs
// binary previous) to this module's snip-jobs under the load of Run, and
// checks Run's invariants over all of it. It follows docs/operations.md's
// upgrade procedure: the database migrated by the previous release and three
// instances of it running, then `snip-jobs migrate` with the new binary, then
// each server restarted with the new binary, one at a time (SIGTERM: it
// resigns and hands over; start; ready), `snip-jobs status` checked between
// servers (exit 0, every job led). Each restart is a Fault of kind
// UpgradeRestart. With o.AwaitReport, the upgrade starts once the previous
// release has stored a weekly report (a cron slot a minute: up to
// reportBound).
func Upgrade(ctx context.Context, o Options, previous string) (*Report, error) {
	if o.Backend != "" && o.Backend != BackendEtcd {
		return nil, fmt.Errorf("chaos: an upgrade runs on the etcd backend only")
	}
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	o.previous = previous
	rep := &Report{Options: o, Seed: o.Seed, Started: time.Now()}
	c, err := startCluster(ctx, o)
	if err != nil {
		return nil, err
	}
	defer c.close()
	rep.Jobs, rep.EtcdVersion = c.jobs, c.etcdVersion
	sleep.For(ctx, o.Pause) // the old release at work
	if o.AwaitReport {
		// The old release stores this week's report first; every slot after
		// (leaders of either release) must leave it alone.
		if err := c.waitReport(ctx); err != nil {
			return nil, fmt.Errorf("the previous release: %w", err)
		}
	}
	rep.Upgrade = &UpgradeStats{}
	if rep.Upgrade.SchemaBefore, err = c.schemaVersion(ctx); err != nil {
		return nil, err
	}
	if err := c.migrateWith(ctx, c.binary); err != nil {
		return nil, fmt.Errorf("the upgrade's migration: %w", err)
	}
	if rep.Upgrade.SchemaAfter, err = c.schemaVersion(ctx); err != nil {
		return nil, err
	}
	if err := installTriggers(ctx, c.pool); err != nil { // tables the migration added
		return nil, err
	}
	for i, in := range c.instances {
		f := c.upgradeRestart(ctx, i+1, in)
		rep.Faults = append(rep.Faults, f)
		o.Log.Info("server upgraded", "n", i+1, "instance", in.name, "led", f.Led, "err", f.Err)
		sleep.For(ctx, o.Pause)
	}
	return c.conclude(ctx, rep)
}

func (c *cluster) schemaVersion(ctx context.Context) (int64, error) {
	var v int64
	err := c.pool.QueryRow(ctx, `SELECT coalesce(max(version_id), 0) FROM goose_db_version WHERE is_applied`).Scan(&v)
	if err != nil {
		return 0, fmt.Errorf("the schema's version: %w", err)
	}
	return v, nil
}

// upgradeRestart stops in with SIGTERM, waits for its jobs' successors,
// starts it with the new binary, waits until the cluster settled, and checks
// `snip-jobs status`.
func (c *cluster) upgradeRestart(ctx context.Context, n int, in *instance) *Fault {
	f := &Fault{N: n, Kind: UpgradeRestart, Target: in.name}
	led := c.ledBy(in.name)
	f.Led, f.Start = ledJobs(led), time.Now()
	err := in.signal(syscall.SIGTERM)
	if err == nil {
		err = c.takeovers(ctx, f, led, 3*c.opts.TTL+10*time.Second)
		if !in.wait(30 * time.Second) {
			err = joinErrs(err, fmt.Errorf("%s did not exit within 30 s of SIGTERM", in.name))
		}
		f.ExitCode = lastExit(in)
		in.binary = c.binary
		err = joinErrs(err, c.restart(ctx, f, in))
	}
	if err == nil {
		if err = c.settle(ctx, f.Healed); err == nil {
			f.Settled = time.Now()
			err = c.statusShowsEveryJobLed(ctx, in)
		}
		// The spread may hand a job to the restarted instance just then,
		// leaving it without a leader for a few milliseconds: settled again,
		// status must show it led.
		for try := 1; errors.Is(err, errNoLeader) && try < 3; try++ {
			if err = c.settle(ctx, time.Now()); err == nil {
				err = c.statusShowsEveryJobLed(ctx, in)
			}
		}
	}
	if err != nil {
		f.Err = err.Error()
	}
	return f
}

// statusShowsEveryJobLed runs the new binary's `status --json` with in's
// config: it must exit 0 and name a leader for every job.
func (c *cluster) statusShowsEveryJobLed(ctx context.Context, in *instance) error {
	ctx, cancel := context.WithTimeout(ctx, readyBound)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.binary, "status", "--json", "--config", in.config)
	cmd.Env = childproc.Env("SNIP_JOBS_DATABASE_URL=" + c.dbURL)
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w: %s", err, ee.Stderr)
		}
		return fmt.Errorf("snip-jobs status after upgrading %s: %w", in.name, err)
	}
	var st struct {
		Jobs []struct {
			Job    string `json:"job"`
			Leader *struct {
				Instance string `json:"instance"`
			} `json:"leader"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return fmt.Errorf("snip-jobs status --json: %w\n%s", err, out)
	}
	for _, j := range st.Jobs {
		if j.Leader == nil {
			return fmt.Errorf("snip-jobs status after upgrading %s: %s has %w", in.name, j.Job, errNoLeader)
		}
	}
	return nil
}
