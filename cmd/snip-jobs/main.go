// Command snip-jobs runs Snip's background jobs: every job on every server, or,
// for a singleton, on exactly one server at a time (the holder of the job's
// etcd term), with its PostgreSQL writes fenced by the term's token.
//
// One binary, several commands: run (the service, or with a job's name one
// run of it now), validate, migrate, status, history, resign, pause, resume,
// drain, undrain, reclaim, report, certs and version.
// `snip-jobs help` lists them; `snip-jobs COMMAND --help` describes one. Exit
// status: 0 success, 1 failure, 2 bad usage or a config file with errors.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/snip/snip-jobs/internal/ttysafe"
	"github.com/snip/snip-jobs/jobs/execjob/supervisor"
)

// command is one subcommand.
type command struct {
	name    string
	args    string // positional arguments, for the usage line
	summary string // one line, for the top-level help
	about   string // one paragraph, for `COMMAND --help`
	// flags adds the command's flags to fs and returns the function that runs
	// the command once they are parsed.
	flags func(fs *flag.FlagSet, cli *cli) func(ctx context.Context, args []string) error
}

func commands() []command {
	return []command{runCommand(), validateCommand(), migrateCommand(), statusCommand(), historyCommand(), resignCommand(),
		pauseCommand(), resumeCommand(), drainCommand(), undrainCommand(),
		reclaimCommand(), reportCommand(), certsCommand(), versionCommand()}
}

// cli is what commands write to.
type cli struct {
	stdout, stderr io.Writer
}

// exitError carries an exit status other than 1.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageError is bad usage: exit status 2.
func usageError(format string, args ...any) error {
	return &exitError{code: 2, err: fmt.Errorf(format, args...)}
}

// errSilent ends a command with status 1 when it has already said why.
var errSilent = errors.New("")

func main() {
	// An exec job's run is supervised by this binary re-executed with a
	// hidden argument: it owns its signals and its descriptors from the
	// start, so it runs before any flag, log or signal handling.
	if len(os.Args) > 1 && os.Args[1] == supervisor.Arg {
		os.Exit(supervisor.Main())
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := runMain(ctx, os.Args[1:], &cli{stdout: os.Stdout, stderr: os.Stderr})
	stop()
	os.Exit(code)
}

// runMain runs the command named by args[0] and returns the exit status. ctx
// ends at the first SIGINT or SIGTERM.
func runMain(ctx context.Context, args []string, c *cli) int {
	if len(args) == 0 {
		usage(c.stderr)
		return 2
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help", "help":
		if name == "help" && len(args) > 1 {
			if cmd, ok := findCommand(args[1]); ok {
				commandHelp(c.stdout, cmd, flagSet(cmd, c))
				return 0
			}
			fmt.Fprintf(c.stderr, "snip-jobs: unknown command %q\n\n", args[1])
			usage(c.stderr)
			return 2
		}
		usage(c.stdout)
		return 0
	}
	cmd, ok := findCommand(name)
	if !ok {
		fmt.Fprintf(c.stderr, "snip-jobs: unknown command %q\n\n", name)
		usage(c.stderr)
		return 2
	}
	fs := flagSet(cmd, c)
	runFn := cmd.flags(fs, c)
	rest, err := parseInterspersed(fs, args[1:])
	if errors.Is(err, flag.ErrHelp) {
		commandHelp(c.stdout, cmd, fs)
		return 0
	}
	if err != nil {
		// flag has printed the problem.
		fmt.Fprintf(c.stderr, "Run 'snip-jobs %s --help' for usage.\n", cmd.name)
		return 2
	}
	err = runFn(ctx, rest)
	if err == nil {
		return 0
	}
	code := 1
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
	}
	if !errors.Is(err, errSilent) {
		// An error may quote the database (a PostgreSQL message, a stored error):
		// escaped (termsafe), its lines kept.
		fmt.Fprintf(c.stderr, "snip-jobs %s: %s\n", cmd.name, ttysafe.Text(err.Error()))
		if code == 2 && strings.HasPrefix(err.Error(), "usage:") {
			fmt.Fprintf(c.stderr, "Run 'snip-jobs %s --help' for usage.\n", cmd.name)
		}
	}
	return code
}

func findCommand(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

func flagSet(cmd command, c *cli) *flag.FlagSet {
	fs := flag.NewFlagSet("snip-jobs "+cmd.name, flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	fs.Usage = func() {} // help is printed by commandHelp, errors by flag itself
	return fs
}

// parseInterspersed parses flags before and after positional arguments
// (`resign JOB --timeout 1m` as well as `resign --timeout 1m JOB`); "--" ends
// the flags.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

func usage(w io.Writer) {
	fmt.Fprint(w, `snip-jobs runs Snip's background jobs from a YAML job list: every job on every
server, or, for a singleton, on exactly one server at a time (the holder of the
job's etcd term), with its PostgreSQL writes fenced by the term's token.

Usage:
  snip-jobs COMMAND [flags] [arguments]

Commands:
`)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range commands() {
		fmt.Fprintf(tw, "  %s\t%s\n", c.name, c.summary)
	}
	tw.Flush()
	fmt.Fprint(w, `
Every command but version reads the config file given by --config (default:
$SNIP_JOBS_CONFIG, else `+defaultConfigPath+`).
Run 'snip-jobs COMMAND --help' for a command's description and flags.
Exit status: 0 success, 1 failure, 2 bad usage or a config file with errors.
`)
}

func commandHelp(w io.Writer, cmd command, fs *flag.FlagSet) {
	line := "snip-jobs " + cmd.name + " [flags]"
	if cmd.args != "" {
		line += " " + cmd.args
	}
	fmt.Fprintf(w, "Usage: %s\n\n%s\n", line, strings.TrimSpace(cmd.about))
	has := false
	fs.VisitAll(func(*flag.Flag) { has = true })
	if has {
		fmt.Fprint(w, "\nFlags:\n")
		fs.SetOutput(w)
		fs.PrintDefaults()
	}
}
