package certsync

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"
	"unicode"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/jobs/certrenew/keyring"
)

// Options are the settings of a certsync job (the config's options:).
type Options struct {
	// Dir is the directory kept in sync: absolute, dedicated to this job.
	// Created (mode 0750) if missing; its parent must exist. It must not be
	// a symbolic link, and it must be owned by the service's user and not
	// writable by its group or others (nor may its .certsync/ be): the job
	// refuses it otherwise.
	Dir string `yaml:"dir"`
	// KeyFile or KeyEnv: where the keys that open the sealed private keys
	// come from, as the renewer's options of the same names.
	KeyFile string `yaml:"key_file"`
	KeyEnv  string `yaml:"key_env"`
	// Group, if set, owns the files (a name or a numeric id), which are then
	// mode 0640 instead of 0600: the TLS server's worker user's group.
	Group string `yaml:"group"`
	// Reload is a command run after each batch that changed the directory:
	// an absolute program path and its arguments, run without a shell. Empty:
	// none (nginx with $ssl_server_name reads the files at each handshake).
	// Its environment is PATH, LANG and LC_ALL (if set), SNIP_CERTSYNC_DIR
	// (Dir) and SNIP_CERTSYNC_JOB (the job's name), nothing else; its output
	// is logged, redacted, only when it fails.
	Reload []string `yaml:"reload"`
	// ReloadTimeout bounds one run of the reload command. Default 30s.
	ReloadTimeout time.Duration `yaml:"reload_timeout"`
	// Settle is how long after a change the directory is synced, so that
	// the changes arriving meanwhile make one batch and one reload. 0: at
	// once. Default 2s.
	Settle time.Duration `yaml:"settle"`
}

// Defaults of the options.
const (
	DefaultReloadTimeout = 30 * time.Second
	DefaultSettle        = 2 * time.Second
	MaxSettle            = 10 * time.Minute
)

// DefaultOptions returns the options a job gets when its config sets none.
// Dir and KeyFile/KeyEnv have no default.
func DefaultOptions() Options {
	return Options{ReloadTimeout: DefaultReloadTimeout, Settle: DefaultSettle}
}

// KeySource is where key_file or key_env says the keys are.
func (o *Options) KeySource() keyring.Source { return keyring.Source{File: o.KeyFile, Env: o.KeyEnv} }

// Files names key_file, which holds the same sealing keys as the renewer's,
// for the checks of every file the config names (configs.File.CheckFiles:
// validate, and run at start): a secret, refused or reported as the
// renewer's is.
func (o *Options) Files() []configs.OptionFile {
	return []configs.OptionFile{{Key: "key_file", Path: o.KeyFile, Holds: configs.Secret}}
}

// Validate reports every option out of range. It reads no files and looks
// up no group: New does, when the job is built.
func (o *Options) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch {
	case o.Dir == "":
		add("dir is required: the directory to keep the certificate files in (dedicated to this job)")
	case !filepath.IsAbs(o.Dir) || filepath.Clean(o.Dir) != o.Dir:
		add("dir %q must be an absolute, clean path (e.g. /var/lib/snip-certs)", o.Dir)
	case o.Dir == "/":
		add("dir must not be /: the directory is dedicated to this job, which removes the .pem files it does not hold")
	}
	if err := o.KeySource().Check(); err != nil {
		errs = append(errs, err)
	}
	if o.Group != "" && strings.ContainsFunc(o.Group, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) || r == ':' }) {
		add("group %q: a group name or numeric id, without spaces or ':'", o.Group)
	}
	if len(o.Reload) > 0 {
		if !filepath.IsAbs(o.Reload[0]) {
			add("reload: the program %q must be an absolute path (it runs without a shell and without $PATH)", o.Reload[0])
		}
		for i, a := range o.Reload {
			if strings.ContainsRune(a, 0) {
				add("reload: argument %d contains a NUL byte", i)
			}
		}
	}
	if o.ReloadTimeout <= 0 {
		add("reload_timeout must be positive, not %v", o.ReloadTimeout)
	}
	if o.Settle < 0 || o.Settle > MaxSettle {
		add("settle must be from 0 to %v, not %v", MaxSettle, o.Settle)
	}
	return errors.Join(errs...)
}
