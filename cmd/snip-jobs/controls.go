package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/snip/snip-jobs/app/connect"
	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/internal/ttysafe"
	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/scheduler/controls"
)

// operatorFlags adds the flags every control command has: --config, --by,
// --timeout.
type operatorFlags struct {
	config  *string
	by      *string
	timeout *time.Duration
}

func addOperatorFlags(fs *flag.FlagSet, timeout time.Duration, timeoutWhat string) operatorFlags {
	return operatorFlags{
		config:  configFlag(fs),
		by:      fs.String("by", "", fmt.Sprintf("who asks, as recorded (default: the OS user and host running the command, user@host; at most %d characters)", controls.MaxBy)),
		timeout: fs.Duration("timeout", timeout, timeoutWhat),
	}
}

// operator is who runs the command, as recorded: --by, else user@host.
func operator(by string) string {
	if by = strings.TrimSpace(by); by != "" {
		return by
	}
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if name == "" {
		name = "uid" + strconv.Itoa(os.Getuid())
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	return name + "@" + host
}

// jobOf is the config's job called name, or a usage error.
func jobOf(f *configs.File, name string) (configs.Job, error) {
	for _, j := range f.Jobs {
		if j.Name == name {
			return j, nil
		}
	}
	return configs.Job{}, &exitError{code: 2, err: fmt.Errorf("%s has no job called %q", f.Path, name)}
}

// loadJob loads the config and finds its job called name (problems exit 2).
func loadJob(c *cli, path, name string) (*configs.File, configs.Job, error) {
	f, err := loadForCommand(c, path)
	if err != nil {
		return nil, configs.Job{}, err
	}
	spec, err := jobOf(f, name)
	return f, spec, err
}

// dial connects to the config's database for one command within timeout:
// the command's context, the pool, and what closes both.
func dial(ctx context.Context, f *configs.File, timeout time.Duration, name string) (context.Context, *pgxpool.Pool, func(), error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	pool, err := connect.Pool(ctx, f, name)
	if err != nil {
		cancel()
		return nil, nil, nil, err
	}
	return ctx, pool, func() { pool.Close(); cancel() }, nil
}

// loadForCommand loads the config; its problems are printed and exit 2.
func loadForCommand(c *cli, path string) (*configs.File, error) {
	f, err := loadConfig(path)
	if err != nil {
		writeLines(c.stderr, "", err.Error())
		return nil, &exitError{code: 2, err: errSilent}
	}
	return f, nil
}

// checkText refuses --by and --reason longer than the database accepts
// (controls.CheckText) as bad usage, before anything is read or contacted.
func checkText(by, reason string) error {
	if err := controls.CheckText(by, reason); err != nil {
		return usageError("usage: %v (%s)", err, "what operators write is read by every instance and shown on every status page")
	}
	return nil
}

// quoted is an operator's reason for printing: escaped, in quotes; "" for none.
func quoted(reason string) string {
	if reason == "" {
		return ""
	}
	return ": " + strconv.Quote(ttysafe.String(reason))
}

func pauseCommand() command {
	return command{
		name:    "pause",
		args:    "JOB",
		summary: "stop a job everywhere until it is resumed (durable, recorded with who and why)",
		about: `Pauses JOB on the whole cluster until 'snip-jobs resume JOB': no instance runs
it, across restarts of every instance. The pause is a row in PostgreSQL
(job_pauses: who — --by, else user@host —, when, --reason); every instance
learns of it at once (a PostgreSQL notification; within a renew interval if
one is missed). A singleton's leader ends its term: the job's context is
cancelled (its cause says paused), it stops within its grace, its last writes
fenced as usual, and the term is resigned and recorded as ended "paused";
no instance campaigns for the job while it is paused. A job that runs
everywhere stops on every instance (a run in progress is cancelled and waited
for up to its grace); a database-mode cron job claims no slot. Cron slots that
fall due while it is paused are recorded skipped when it is resumed (unless
resume --catch-up). A pending manual run of the job waits for the resume.
For a singleton led through terms, pause then waits (up to --timeout) until
its leader has ended its term, and says so. Pausing a paused job changes
nothing and says who paused it.`,
		flags: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			of := addOperatorFlags(fs, 30*time.Second, "give up waiting for the leader's term to end after this long")
			reason := fs.String("reason", "", fmt.Sprintf("why, as recorded and shown by status and the status page (at most %d characters)", controls.MaxReason))
			endpoints := fs.String("endpoints", "", "comma-separated etcd endpoints to use instead of the config's")
			return func(ctx context.Context, args []string) error {
				if len(args) != 1 {
					return usageError("usage: pause takes exactly one argument, the job's name")
				}
				if err := checkText(*of.by, *reason); err != nil {
					return err
				}
				f, spec, err := loadJob(c, *of.config, args[0])
				if err != nil {
					return err
				}
				ctx, pool, hangUp, err := dial(ctx, f, *of.timeout, "pause")
				if err != nil {
					return err
				}
				defer hangUp()
				var watch *leaders
				if spec.Mode() == configs.ModeLeader {
					watch = watchLeaders(ctx, c.stdout, f, *endpoints, newLogger(f.Log, c.stderr), []string{spec.Name}, "")
					defer watch.close()
				}
				p, already, err := controls.PauseJob(ctx, pool, spec.Name, operator(*of.by), *reason)
				if err != nil {
					return err
				}
				if already {
					fmt.Fprintf(c.stdout, "%s: already paused by %s since %s%s\n", spec.Name, ttysafe.String(p.By), p.Since.UTC().Format(time.RFC3339), quoted(p.Reason))
					return nil
				}
				fmt.Fprintf(c.stdout, "%s: paused by %s%s\n", spec.Name, ttysafe.String(p.By), quoted(p.Reason))
				after := fmt.Sprintf("%s: no instance runs it until 'snip-jobs resume %s'", spec.Name, spec.Name)
				if watch == nil {
					fmt.Fprintf(c.stdout, "%s (a run in progress stops within its grace, %v)\n", after, spec.Grace)
					return nil
				}
				return watch.wait(ctx, after)
			}
		},
	}
}

func resumeCommand() command {
	return command{
		name:    "resume",
		args:    "JOB",
		summary: "let a paused job run again (its cron slots missed meanwhile skipped, or caught up)",
		about: `Lifts JOB's pause (snip-jobs pause): its instances run it again at once (a
singleton's instances campaign for it). For a cron job, the slots that fell due
while it was paused are recorded skipped first, in the same transaction (at
most the newest 10,000; cron_slots with token 0, no instance, and an error
saying who paused and resumed it), so that the catch-up sweep does not run
them. With --catch-up none is recorded: the catch-up sweep treats them as slots
missed while nobody ran the job, and runs them by the job's catch_up policy
(latest: the newest; all: every one within catch_up_window; none: none). A
slot due within the on-time window (a minute, or 3 × ttl) before the resume
is skipped too, without --catch-up. Resuming a job that is not paused changes
nothing and says so. It needs only PostgreSQL.`,
		flags: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			of := addOperatorFlags(fs, 10*time.Second, "give up after this long")
			catchUp := fs.Bool("catch-up", false, "let the catch-up sweep run the cron slots that fell due while paused, by the job's catch_up policy, instead of recording them skipped")
			return func(ctx context.Context, args []string) error {
				if len(args) != 1 {
					return usageError("usage: resume takes exactly one argument, the job's name")
				}
				if err := checkText(*of.by, ""); err != nil {
					return err
				}
				f, spec, err := loadJob(c, *of.config, args[0])
				if err != nil {
					return err
				}
				ctx, pool, hangUp, err := dial(ctx, f, *of.timeout, "resume")
				if err != nil {
					return err
				}
				defer hangUp()
				r, err := controls.ResumeJob(ctx, pool, spec, operator(*of.by), *catchUp)
				if err != nil {
					return err
				}
				printResumed(c.stdout, spec, r, *catchUp)
				return nil
			}
		},
	}
}

// printResumed says what resume did.
func printResumed(w io.Writer, spec configs.Job, r controls.Resumed, catchUp bool) {
	if !r.WasPaused {
		fmt.Fprintf(w, "%s: not paused: nothing to resume\n", spec.Name)
		return
	}
	p := r.Pause
	fmt.Fprintf(w, "%s: resumed (paused by %s for %s%s)\n", spec.Name, ttysafe.String(p.By), ago(r.Until, p.Since), quoted(p.Reason))
	if spec.Schedule.Kind != configs.Cron || r.Due == 0 {
		return
	}
	span := fmt.Sprintf("%d cron slot(s) fell due while paused (%s to %s)", r.Due, r.First.UTC().Format(time.RFC3339), r.Last.UTC().Format(time.RFC3339))
	switch {
	case catchUp:
		fmt.Fprintf(w, "%s: %s: left to the catch-up sweep (catch_up: %s, window %v)\n", spec.Name, span, spec.Schedule.CatchUp, spec.Schedule.CatchUpWindow)
	default:
		fmt.Fprintf(w, "%s: %s: %d recorded skipped\n", spec.Name, span, r.Skipped)
	}
}

func drainCommand() command {
	return command{
		name:    "drain",
		summary: "make an instance hand its singletons over and take none until undrained",
		about: `Drains an instance (--instance, default the config's instance: the server the
command runs on): it hands each singleton it leads over at once, as resign
does (the term ends "drained", and another instance wins it), and campaigns for
none — nor claims a database-mode slot or manual run — until 'snip-jobs
undrain', or until it is started with 'snip-jobs run --undrain'. Jobs that run
everywhere go on on it. The drain is a row in PostgreSQL (instance_drains:
who, when, --reason), so it outlives a restart of the instance: drain a
server before a planned reboot, and undrain it (or start it with --undrain)
after. The other instances do not count a drained one when they spread the
singletons. drain then waits (up to --timeout) until the instance leads no
job, and says which it handed over.`,
		flags: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			of := addOperatorFlags(fs, 60*time.Second, "give up waiting for the hand-overs after this long")
			instance := fs.String("instance", "", "the instance to drain (default: the config's instance)")
			reason := fs.String("reason", "", fmt.Sprintf("why, as recorded and shown by status and the status page (at most %d characters)", controls.MaxReason))
			endpoints := fs.String("endpoints", "", "comma-separated etcd endpoints to use instead of the config's")
			return func(ctx context.Context, args []string) error {
				if len(args) > 0 {
					return usageError("usage: drain takes no arguments (--instance NAME names another instance)")
				}
				if err := checkText(*of.by, *reason); err != nil {
					return err
				}
				f, err := loadForCommand(c, *of.config)
				if err != nil {
					return err
				}
				name := cmpOr(*instance, f.Instance)
				if err := leadership.CheckName("instance", name); err != nil {
					return &exitError{code: 2, err: err}
				}
				ctx, pool, hangUp, err := dial(ctx, f, *of.timeout, "drain")
				if err != nil {
					return err
				}
				defer hangUp()
				var watch *leaders
				if connect.NeedsTerms(f) {
					watch = watchLeaders(ctx, c.stdout, f, *endpoints, newLogger(f.Log, c.stderr), leaderJobs(f), name)
					defer watch.close()
				}
				d, already, err := controls.DrainInstance(ctx, pool, name, operator(*of.by), *reason)
				if err != nil {
					return err
				}
				if already {
					fmt.Fprintf(c.stdout, "%s: already drained by %s since %s%s\n", name, ttysafe.String(d.By), d.Since.UTC().Format(time.RFC3339), quoted(d.Reason))
				} else {
					fmt.Fprintf(c.stdout, "%s: drained by %s%s\n", name, ttysafe.String(d.By), quoted(d.Reason))
				}
				if watch == nil {
					return nil
				}
				return watch.wait(ctx, fmt.Sprintf("%s: leads no singleton until 'snip-jobs undrain --instance %s' (or 'snip-jobs run --undrain' there)", name, name))
			}
		},
	}
}

func undrainCommand() command {
	return command{
		name:    "undrain",
		summary: "let a drained instance lead singletons again",
		about: `Lifts an instance's drain (snip-jobs drain; --instance, default the config's
instance): it campaigns for its singletons again at once (and the spread
gives it its share). 'snip-jobs run --undrain' does the same when the
instance starts. Undraining an instance that is not drained changes nothing
and says so. It needs only PostgreSQL.`,
		flags: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			of := addOperatorFlags(fs, 10*time.Second, "give up after this long")
			instance := fs.String("instance", "", "the instance to undrain (default: the config's instance)")
			return func(ctx context.Context, args []string) error {
				if len(args) > 0 {
					return usageError("usage: undrain takes no arguments (--instance NAME names another instance)")
				}
				if err := checkText(*of.by, ""); err != nil {
					return err
				}
				f, err := loadForCommand(c, *of.config)
				if err != nil {
					return err
				}
				name := cmpOr(*instance, f.Instance)
				ctx, pool, hangUp, err := dial(ctx, f, *of.timeout, "undrain")
				if err != nil {
					return err
				}
				defer hangUp()
				d, was, err := controls.UndrainInstance(ctx, pool, name)
				switch {
				case err != nil:
					return err
				case !was:
					fmt.Fprintf(c.stdout, "%s: not drained: nothing to undrain\n", name)
				default:
					fmt.Fprintf(c.stdout, "%s: undrained (drained by %s for %s%s)\n", name, ttysafe.String(d.By), ago(time.Now(), d.Since), quoted(d.Reason))
				}
				return nil
			}
		},
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// leaderJobs are the config's jobs led through terms.
func leaderJobs(f *configs.File) []string {
	var out []string
	for _, j := range f.Jobs {
		if j.Mode() == configs.ModeLeader {
			out = append(out, j.Name)
		}
	}
	return out
}

// leaders follows the leaders of some jobs (of one instance, or any) as an
// operator's command sees them: read once before the control is written
// (watchLeaders), then until they are gone (wait).
type leaders struct {
	w        io.Writer
	cluster  leadership.Cluster
	where    string
	close    func()
	jobs     []string
	instance string // "": any
	before   map[string]leadership.Leader
	err      error // the backend could not be opened or read: said, not fatal
}

// watchLeaders opens the backend and reads who leads jobs (led by instance,
// or by any instance when "") before the control is written.
func watchLeaders(ctx context.Context, w io.Writer, f *configs.File, endpoints string, log *slog.Logger, jobs []string, instance string) *leaders {
	l := &leaders{w: w, jobs: jobs, instance: instance, close: func() {}}
	if l.cluster, l.where, l.close, l.err = connect.Cluster(f, endpoints, log); l.err == nil {
		l.before, l.err = l.read(ctx)
	}
	return l
}

func (l *leaders) read(ctx context.Context) (map[string]leadership.Leader, error) {
	out := map[string]leadership.Leader{}
	for _, job := range l.jobs {
		ld, ok, err := l.cluster.Leader(ctx, job)
		if err != nil {
			return nil, fmt.Errorf("read the leader of %s from %s: %w", job, l.where, err)
		}
		if ok && (l.instance == "" || ld.Instance == l.instance) {
			out[job] = ld
		}
	}
	return out, nil
}

// wait waits (until ctx ends) until none of the jobs is led (by the
// instance), reading the backend every 100 ms, then says which terms ended
// and then after. A backend it cannot read is said, not an error: the
// control is recorded, and takes effect all the same.
func (l *leaders) wait(ctx context.Context, after string) error {
	if l.err != nil {
		fmt.Fprintf(l.w, "(cannot read who leads: %s)\n%s\n", ttysafe.String(l.err.Error()), after)
		return nil
	}
	var err error
	for {
		var now map[string]leadership.Leader
		if now, err = l.read(ctx); err != nil || len(now) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if err != nil {
			break
		}
	}
	for _, job := range slices.Sorted(maps.Keys(l.before)) {
		ld := l.before[job]
		fmt.Fprintf(l.w, "%s: %s (token %d) handed it over\n", job, ttysafe.String(ld.Instance), ld.Token)
	}
	switch {
	case err != nil:
		return fmt.Errorf("waiting for the hand-over: %w (the control is recorded and takes effect all the same; 'snip-jobs status' shows who leads)", err)
	case len(l.before) == 0 && l.instance != "":
		fmt.Fprintf(l.w, "%s led no singleton\n", l.instance)
	case len(l.before) == 0:
		fmt.Fprintf(l.w, "%s had no leader\n", strings.Join(l.jobs, ", "))
	}
	fmt.Fprintln(l.w, after)
	return nil
}
