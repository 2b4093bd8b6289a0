package certrenew

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/mail"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/jobs/certrenew/keyring"
)

// LetsEncrypt is the default ACME directory: Let's Encrypt's production CA.
const LetsEncrypt = "https://acme-v02.api.letsencrypt.org/directory"

// Options are the settings of a certrenew job (the config's options:). The
// schedule is the job's own (every: 1h, jitter: ...); the job must be a
// singleton.
type Options struct {
	// Directory is the ACME directory URL (https). Default Let's Encrypt
	// production.
	Directory string `yaml:"directory"`
	// Email is the account's contact address. Optional.
	Email string `yaml:"email"`
	// Profile is the ACME profile to order (e.g. "classic", "tlsserver",
	// "shortlived" at Let's Encrypt). Empty: the CA's default.
	Profile string `yaml:"profile"`
	// CARootsFile is a PEM file of roots to trust for the ACME server itself
	// (a private CA, Pebble). Empty: the system's roots.
	CARootsFile string `yaml:"ca_roots_file"`

	// ChallengeListen is where every instance serves HTTP-01 tokens
	// (certserve.Challenges), e.g. ":80". The CA connects to port 80 of the
	// domain: this address must receive that traffic. Read by cmd, which
	// mounts the handler; the job itself does not listen.
	ChallengeListen string `yaml:"challenge_listen"`

	// KeyFile or KeyEnv names where the keys that seal private keys come
	// from (exactly one): a file, or an environment variable, holding one or
	// more base64 lines of 32 bytes, the sealing key first. Never logged.
	KeyFile string `yaml:"key_file"`
	KeyEnv  string `yaml:"key_env"`

	// LockDelay is how long a new term waits before ordering when the
	// previous term ended in the middle of a pass without saying so (expiry,
	// crash), counted from when that term was last seen alive. It must cover
	// the longest pause of a process you want to survive plus the leadership
	// TTL. 0 turns it off. Default 1m.
	LockDelay time.Duration `yaml:"lock_delay"`
	// Concurrency is how many domains are worked on at once. Default 4.
	Concurrency int `yaml:"concurrency"`
	// OrderBudget is how many orders the renewer may start in any 3 hours,
	// counted in PostgreSQL across terms and instances (renewals included;
	// Let's Encrypt allows 300 new orders per account per 3 h). Default 300.
	OrderBudget int `yaml:"order_budget"`

	// RenewFraction is when to renew without ARI, as a fraction of the
	// lifetime: default 2/3. ShortRenewFraction (default 1/2) applies to
	// certificates whose lifetime is at most ShortLifetime (default 240h).
	RenewFraction      float64       `yaml:"renew_fraction"`
	ShortRenewFraction float64       `yaml:"short_renew_fraction"`
	ShortLifetime      time.Duration `yaml:"short_lifetime"`

	// Statuses are the custom_domains.status values that want a
	// certificate. Default [active].
	Statuses []string `yaml:"statuses"`
	// RequirePublicTLD marks invalid (not_public) the names whose
	// top-level domain is not a public one (CheckPublicTLD), which public
	// CAs refuse, instead of ordering for them and backing off forever.
	// Default true; false for a private or test CA (names under .test).
	RequirePublicTLD bool `yaml:"require_public_tld"`

	// OrderTimeout bounds lego's wait for a finalized order (it polls 60
	// times within it). Default 30s.
	OrderTimeout time.Duration `yaml:"order_timeout"`
	// UnavailablePause is how long the whole renewer stops asking the CA
	// after a 503 that carried no Retry-After. Default 10m.
	UnavailablePause time.Duration `yaml:"unavailable_pause"`

	// NewDomainCheck is how often the leader, between passes, looks for
	// custom_domains rows that changed since its last pass (a domain
	// added, say) and runs a pass at once if any did, so that new domains
	// get their first certificate promptly rather than at the next
	// interval. 0 turns it off. Default 30s.
	NewDomainCheck time.Duration `yaml:"new_domain_check"`
}

// Defaults and limits of the options.
const (
	DefaultLockDelay        = time.Minute
	DefaultConcurrency      = 4
	DefaultOrderBudget      = 300
	DefaultShortLifetime    = 240 * time.Hour
	DefaultOrderTimeout     = 30 * time.Second
	DefaultUnavailablePause = 10 * time.Minute
	DefaultNewDomainCheck   = 30 * time.Second
	MaxConcurrency          = 64
)

// DefaultOptions returns the options a job gets when its config sets none.
// KeyFile/KeyEnv have no default: one must be set.
func DefaultOptions() Options {
	return Options{
		Directory:          LetsEncrypt,
		ChallengeListen:    ":80",
		LockDelay:          DefaultLockDelay,
		Concurrency:        DefaultConcurrency,
		OrderBudget:        DefaultOrderBudget,
		RenewFraction:      2.0 / 3.0,
		ShortRenewFraction: 0.5,
		ShortLifetime:      DefaultShortLifetime,
		Statuses:           []string{"active"},
		RequirePublicTLD:   true,
		OrderTimeout:       DefaultOrderTimeout,
		UnavailablePause:   DefaultUnavailablePause,
		NewDomainCheck:     DefaultNewDomainCheck,
	}
}

// Validate reports every option out of range. It reads no files: Keyring
// and CARoots do, when the job is built.
func (o *Options) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if u, err := url.Parse(o.Directory); err != nil || u.Scheme != "https" || u.Host == "" {
		add("directory must be an https URL (the ACME directory), not %q", o.Directory)
	}
	if o.Email != "" {
		if a, err := mail.ParseAddress(o.Email); err != nil || a.Address != o.Email {
			add("email %q is not a plain e-mail address", o.Email)
		}
	}
	if strings.ContainsFunc(o.Profile, func(r rune) bool { return r <= ' ' || r > '~' }) {
		add("profile %q: printable ASCII without spaces", o.Profile)
	}
	if host, port, err := net.SplitHostPort(o.ChallengeListen); err != nil {
		add("challenge_listen must be host:port or :port (e.g. \":80\"), not %q", o.ChallengeListen)
	} else if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		add("challenge_listen %q: port must be from 1 to 65535", o.ChallengeListen)
	} else if host != "" && net.ParseIP(host) == nil && host != "localhost" {
		add("challenge_listen %q: the host must be an IP address (or empty for all)", o.ChallengeListen)
	}
	if err := o.KeySource().Check(); err != nil {
		errs = append(errs, err)
	}
	if o.LockDelay < 0 {
		add("lock_delay must be 0 (off) or positive, not %v", o.LockDelay)
	}
	if o.Concurrency < 1 || o.Concurrency > MaxConcurrency {
		add("concurrency must be from 1 to %d, not %d", MaxConcurrency, o.Concurrency)
	}
	if o.OrderBudget < 1 {
		add("order_budget must be at least 1 (orders per 3h), not %d", o.OrderBudget)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"renew_fraction", o.RenewFraction}, {"short_renew_fraction", o.ShortRenewFraction}} {
		if !(f.v > 0 && f.v < 1) {
			add("%s must be between 0 and 1 (a fraction of the lifetime), not %v", f.name, f.v)
		}
	}
	if o.ShortLifetime < 0 {
		add("short_lifetime must not be negative, not %v", o.ShortLifetime)
	}
	if len(o.Statuses) == 0 {
		add("statuses must name at least one custom_domains.status value")
	}
	for _, s := range o.Statuses {
		if strings.TrimSpace(s) == "" {
			add("statuses: empty value")
		}
	}
	if o.OrderTimeout < time.Second {
		add("order_timeout must be at least 1s, not %v", o.OrderTimeout)
	}
	if o.UnavailablePause < time.Second {
		add("unavailable_pause must be at least 1s, not %v", o.UnavailablePause)
	}
	if o.NewDomainCheck < 0 {
		add("new_domain_check must be 0 (off) or positive, not %v", o.NewDomainCheck)
	}
	return errors.Join(errs...)
}

// Files names the files the options name, for the checks of every file the
// config names (configs.File.CheckFiles: validate, and run at start): the
// sealing keys (a secret), and the ACME server's roots.
func (o *Options) Files() []configs.OptionFile {
	return []configs.OptionFile{
		{Key: "key_file", Path: o.KeyFile, Holds: configs.Secret},
		{Key: "ca_roots_file", Path: o.CARootsFile, Holds: configs.Certificates},
	}
}

// Keyring reads the encryption keys from key_file or key_env. Errors name
// the file or variable, never the value.
func (o *Options) Keyring() (*keyring.Keyring, error) {
	k, err := o.KeySource().Load()
	if err != nil {
		return nil, fmt.Errorf("certrenew: %w", err)
	}
	return k, nil
}

// KeySource is where key_file or key_env says the keys are.
func (o *Options) KeySource() keyring.Source { return keyring.Source{File: o.KeyFile, Env: o.KeyEnv} }

// CARoots reads ca_roots_file (a regular file of at most
// configs.MaxCertificateFileSize); nil (the system's roots) when it is not
// set.
func (o *Options) CARoots() (*x509.CertPool, error) {
	if o.CARootsFile == "" {
		return nil, nil
	}
	pem, err := configs.ReadFile(configs.NamedFile{Key: "options.ca_roots_file", Path: o.CARootsFile, Holds: configs.Certificates})
	if err != nil {
		return nil, fmt.Errorf("certrenew: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("certrenew: ca_roots_file %s holds no PEM certificate", o.CARootsFile)
	}
	return pool, nil
}
