package configs

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/robfig/cron/v3"
)

// Defaults applied by Parse to settings that are absent (or 0 where noted in the
// example file).
const (
	DefaultEtcdEmbeddedDir = "/var/lib/snip-jobs/etcd"
	DefaultEtcdDialTimeout = 5 * time.Second
	DefaultDatabaseURLEnv  = "SNIP_JOBS_DATABASE_URL"
	DefaultHTTPListen      = "127.0.0.1:9469"
	DefaultShutdownTimeout = 15 * time.Second
	DefaultGrace           = 10 * time.Second
	DefaultCatchUpWindow   = 24 * time.Hour
)

// File is a parsed, checked configuration file with every default filled in.
type File struct {
	// Path is the file it was read from (the name given to Parse).
	Path string
	// Instance names this server among its peers (default: the host name).
	Instance        string
	Etcd            Etcd
	Postgres        Postgres
	Leadership      Leadership
	Kubernetes      Kubernetes // used with leadership.backend: kubernetes only
	HTTP            HTTP
	Log             Log
	ShutdownTimeout time.Duration
	// Jobs in file order; names are unique.
	Jobs []Job
	// settings maps each setting naming a file ("etcd.tls.ca") to where its
	// value is written (SettingPos).
	settings map[string]Pos
}

// Etcd says how to reach etcd.
type Etcd struct {
	// Endpoints of an external cluster; empty means run starts an embedded
	// single-member etcd in EmbeddedDir.
	Endpoints   []string
	EmbeddedDir string
	Prefix      string
	DialTimeout time.Duration
	TLS         TLS
	Auth        Auth
}

// Embedded reports whether run should start its own single-member etcd.
func (e Etcd) Embedded() bool { return len(e.Endpoints) == 0 }

// TLS names PEM files for the etcd client. All empty means plain TLS settings
// (system roots for https endpoints); Cert and Key are set together.
type TLS struct {
	CA, Cert, Key string
}

// Auth is etcd user authentication. User empty means none. The password is read by
// File.EtcdPassword from PasswordFile or PasswordEnv (exactly one is set when User is).
type Auth struct {
	User         string
	PasswordFile string
	PasswordEnv  string
}

// Postgres says where the database URL is found (exactly one of URLEnv, URLFile is
// set); File.DatabaseURL reads it.
type Postgres struct {
	URLEnv         string
	URLFile        string
	MigrateOnStart bool
}

// Leadership holds the backend that keeps the terms and the lease timing, with
// leadership.TimingDefaults applied and checked by leadership.CheckTiming
// (whose rules are stricter than package kubelease's, so both backends
// accept the result).
type Leadership struct {
	Backend                    Backend
	TTL, Margin, RenewInterval time.Duration
}

// Backend is where singletons' terms are kept (leadership.backend).
type Backend string

// Backends.
const (
	BackendEtcd       Backend = "etcd"       // package leadership (default)
	BackendKubernetes Backend = "kubernetes" // package leadership/kubelease: coordination.k8s.io Leases
)

// Kubernetes says how to reach the API server that holds the Leases, and
// where: Server with TokenFile; or a Kubeconfig file; or neither, from
// inside the cluster as the pod's service account (KUBERNETES_SERVICE_HOST
// and _PORT, and the token, CA and namespace files under
// /var/run/secrets/kubernetes.io/serviceaccount).
type Kubernetes struct {
	Server    string // https://host:port; "" in the cluster or with Kubeconfig
	TokenFile string // with Server: the bearer token, re-read as it changes
	CAFile    string // with Server: the server's CA ("" the system roots)
	// Kubeconfig is a kubeconfig file (kubectl's format: its server,
	// credentials, exec plugins) instead of Server; Context picks one of
	// its contexts ("" its current context).
	Kubeconfig, Context string
	// Namespace of the Leases; "" in the cluster: the service account's;
	// with Kubeconfig: the context's, else "default".
	Namespace string
	Prefix    string // starts every Lease's name (default layout.DefaultPrefix)
}

// InCluster reports whether the API server is reached as the pod's service account.
func (k Kubernetes) InCluster() bool { return k.Server == "" && k.Kubeconfig == "" }

// HTTP is the listener for /metrics, /healthz, /readyz and /status.
type HTTP struct {
	Listen string // host:port
	// AllowedHosts are the host names (lower case, no final dot) requests may
	// name in Host besides loopback names and IP addresses: the DNS-rebinding
	// guard of package admin.
	AllowedHosts []string
}

// LogFormat is how log lines are written.
type LogFormat string

// Log formats.
const (
	LogAuto LogFormat = "auto" // text on a terminal, JSON otherwise
	LogText LogFormat = "text"
	LogJSON LogFormat = "json"
)

// Log configures logging.
type Log struct {
	Format LogFormat
	Level  slog.Level
}

// Job is one entry of the jobs list.
type Job struct {
	Name string
	Type string
	// Singleton jobs run only on the instance holding the job's leadership.
	Singleton bool
	Schedule  Schedule
	// Grace is how long the job may take to stop after its term (or the process)
	// ends.
	Grace time.Duration
	// ProgressTimeout is the watchdog for singletons; 0 = off.
	ProgressTimeout time.Duration
	// Options are the job's options as written, for its type to decode
	// (DecodeOptions); checked by the type's OptionsType at Parse.
	Options Options
	// Pos is where the job's entry starts in the file.
	Pos Pos
}

// Mode is where a job runs: derived from singleton and coordination by
// Job.Mode, the one place that does.
type Mode int

// Modes of a job.
const (
	ModeEverywhere Mode = iota // not a singleton: on every instance
	ModeLeader                 // a singleton run by the holder of its etcd term
	ModeDatabase               // a singleton cron job whose slots PostgreSQL decides (coordination: database)
)

func (m Mode) String() string {
	switch m {
	case ModeEverywhere:
		return "everywhere"
	case ModeLeader:
		return "leader"
	case ModeDatabase:
		return "database"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Mode says where the job runs.
func (j Job) Mode() Mode {
	switch {
	case !j.Singleton:
		return ModeEverywhere
	case j.Schedule.Kind == Cron && j.Schedule.Coordination == Database:
		return ModeDatabase
	}
	return ModeLeader
}

// ScheduleKind says when a job runs. The zero value is not a valid kind.
type ScheduleKind int

// Schedule kinds.
const (
	Continuous ScheduleKind = iota + 1 // runs until its term (or the process) ends
	Interval                           // every Every, plus up to Jitter
	Cron                               // at the times of a cron spec
)

func (k ScheduleKind) String() string {
	switch k {
	case Continuous:
		return "continuous"
	case Interval:
		return "every"
	case Cron:
		return "cron"
	}
	return fmt.Sprintf("ScheduleKind(%d)", int(k))
}

// Coordination says how a singleton cron job's instances agree on who runs a slot.
type Coordination int

// Coordination modes.
const (
	// Leader: only the job's etcd leader fires the schedule (default).
	Leader Coordination = iota
	// Database: every instance fires; a unique (job, slot) row in PostgreSQL
	// decides which one runs it.
	Database
)

func (c Coordination) String() string {
	switch c {
	case Leader:
		return "leader"
	case Database:
		return "database"
	}
	return fmt.Sprintf("Coordination(%d)", int(c))
}

// CatchUpPolicy says what a cron job does with slots missed while nobody ran it.
type CatchUpPolicy int

// Catch-up policies.
const (
	Latest CatchUpPolicy = iota // run the most recent missed slot only (default)
	All                         // run every missed slot, oldest first
	None                        // skip missed slots
)

func (c CatchUpPolicy) String() string {
	switch c {
	case Latest:
		return "latest"
	case All:
		return "all"
	case None:
		return "none"
	}
	return fmt.Sprintf("CatchUpPolicy(%d)", int(c))
}

// Schedule is when a job runs. Fields that do not apply to Kind are zero.
type Schedule struct {
	Kind ScheduleKind
	// Interval jobs.
	Every, Jitter time.Duration
	// Cron jobs. Cron is the spec as written; Spec is it parsed, computing its
	// times in Location whatever the location of the time passed to Next.
	Cron          string
	Spec          cron.Schedule
	Location      *time.Location
	Coordination  Coordination
	CatchUp       CatchUpPolicy
	CatchUpWindow time.Duration
}

// Types tells Parse which job types exist and what options each takes.
//
// Option values must not hold secrets themselves (name a file or an environment
// variable instead, as the rest of the file does): File.Redacted prints them.
type Types interface {
	// Options returns how a job type reads its options (nil: it takes none),
	// or ok=false if the type is unknown. Parse calls it on every job of the
	// type, with or without options.
	Options(jobType string) (read OptionsType, ok bool)
	// Names lists the known types, for "unknown type" messages.
	Names() []string
}

// Defaults is what a job type gives the entries of its jobs that leave it
// out: a schedule (a cron spec, or an interval with its jitter) for an entry
// that sets none of continuous, every and cron, and for cron schedules the
// catch-up policy and window. The zero value gives nothing.
type Defaults struct {
	Cron          string
	Every, Jitter time.Duration
	CatchUp       CatchUpPolicy // applies when the entry has no catch_up
	CatchUpWindow time.Duration // applies when the entry has no catch_up_window; 0: DefaultCatchUpWindow
}

// TypeDefaults is implemented by Types whose job types have defaults.
type TypeDefaults interface {
	Defaults(jobType string) Defaults
}
