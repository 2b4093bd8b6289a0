package execjob

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/snip/snip-jobs/configs"
)

// Options are the options of a job of type exec.
type Options struct {
	// Command is the program and its arguments, run without a shell (write
	// one, ["/bin/sh", "-c", "…"], to have one). The program is an absolute
	// path to an executable file, checked when the config is loaded.
	Command []string `yaml:"command"`
	// Env are variables added to the program's environment (never the
	// service's: see package command). A name of the contract's
	// (SNIP_JOBS_…) is refused.
	Env map[string]string `yaml:"env"`
	// Dir is the program's working directory, absolute (default /).
	Dir string `yaml:"dir"`
	// Timeout bounds each run: past it the program's tree is stopped as at
	// a term's end and the run recorded timed out. Unset: no bound but the
	// term's (a continuous job's program may run for its whole term).
	Timeout *time.Duration `yaml:"timeout"`
	// KillGrace is how long the program's tree has between SIGTERM and
	// SIGKILL when its run is stopped (default: half the job's grace, at
	// most 5 s). It must be below the job's grace, within which the
	// scheduler waits for a stopped run.
	KillGrace time.Duration `yaml:"kill_grace"`

	grace time.Duration // the job's, for Validate
}

// defaults are an exec job's options before its entry's.
func defaults(spec configs.Job) func() Options {
	return func() Options {
		return Options{Dir: "/", KillGrace: min(5*time.Second, spec.Grace/2), grace: spec.Grace}
	}
}

// envName is what an added variable's name may be.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Validate says every problem of the options, each at its option.
func (o *Options) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, &configs.OptionError{Key: key, Err: fmt.Errorf(format, args...)})
	}
	if err := checkCommand(o.Command); err != nil {
		bad("command", "%v", err)
	}
	for name, value := range o.Env {
		switch {
		case !envName.MatchString(name):
			bad("env", "%q is not a variable name (letters, digits and _, not starting with a digit)", name)
		case strings.HasPrefix(name, contractPrefix):
			bad("env", "%s: the SNIP_JOBS_ variables are the contract's, set by snip-jobs for each run (docs/operations.md, \"Programs as jobs\")", name)
		case strings.ContainsRune(value, 0):
			bad("env", "%s: the value contains a NUL byte", name)
		}
	}
	if err := checkDir(o.Dir); err != nil {
		bad("dir", "%v", err)
	}
	switch {
	case o.KillGrace <= 0:
		bad("kill_grace", "must be positive, not %v", o.KillGrace)
	case o.grace > 0 && o.KillGrace >= o.grace:
		bad("kill_grace", "%v must be below the job's grace (%v), within which the scheduler waits for a stopped run", o.KillGrace, o.grace)
	}
	if o.Timeout != nil && *o.Timeout <= o.KillGrace {
		bad("timeout", "%v must be above kill_grace (%v): a run stopped at its timeout gets kill_grace to end", *o.Timeout, o.KillGrace)
	}
	return errors.Join(errs...)
}

// checkCommand says what is wrong with a command: none, a program that is
// not an absolute path to an executable regular file, a NUL byte.
func checkCommand(argv []string) error {
	if len(argv) == 0 || argv[0] == "" {
		return errors.New("is required: the program and its arguments, e.g. [/usr/local/bin/backup, --full]")
	}
	for i, a := range argv {
		if strings.ContainsRune(a, 0) {
			return fmt.Errorf("argument %d contains a NUL byte", i)
		}
	}
	prog := argv[0]
	if !filepath.IsAbs(prog) {
		return fmt.Errorf("the program %q must be an absolute path (it runs without a shell and without $PATH)", prog)
	}
	info, err := os.Stat(prog)
	switch {
	case err != nil:
		return fmt.Errorf("the program: %w", err)
	case !info.Mode().IsRegular():
		return fmt.Errorf("the program %s is not a regular file (mode %v)", prog, info.Mode())
	case info.Mode().Perm()&0o111 == 0:
		return fmt.Errorf("the program %s is not executable (mode %04o)", prog, info.Mode().Perm())
	}
	return nil
}

// checkDir says what is wrong with a working directory.
func checkDir(dir string) error {
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("%q must be an absolute path", dir)
	}
	info, err := os.Stat(dir)
	switch {
	case err != nil:
		return err
	case !info.IsDir():
		return fmt.Errorf("%s is not a directory", dir)
	}
	return nil
}
