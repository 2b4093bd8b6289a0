package configs

import (
	"fmt"
	"strings"
	"time"

	"github.com/goccy/go-yaml"
)

// Redacted returns the effective configuration, defaults included, as YAML in the
// file's own format (for `snip-jobs validate --print`). Secrets are not in a File
// at all; only where they are read from is printed.
func (f *File) Redacted() string {
	type kv = yaml.MapItem
	type m = yaml.MapSlice
	dur := func(d time.Duration) string { return fmtDuration(d) }

	etcd := m{}
	if f.Etcd.Embedded() {
		etcd = append(etcd, kv{Key: "endpoints", Value: []string{}}, kv{Key: "embedded_dir", Value: f.Etcd.EmbeddedDir})
	} else {
		etcd = append(etcd, kv{Key: "endpoints", Value: f.Etcd.Endpoints})
	}
	etcd = append(etcd, kv{Key: "prefix", Value: f.Etcd.Prefix}, kv{Key: "dial_timeout", Value: dur(f.Etcd.DialTimeout)})
	if t := f.Etcd.TLS; t != (TLS{}) {
		tls := m{}
		for _, e := range []kv{{Key: "ca", Value: t.CA}, {Key: "cert", Value: t.Cert}, {Key: "key", Value: t.Key}} {
			if e.Value != "" {
				tls = append(tls, e)
			}
		}
		etcd = append(etcd, kv{Key: "tls", Value: tls})
	}
	if a := f.Etcd.Auth; a.User != "" {
		auth := m{{Key: "user", Value: a.User}}
		if a.PasswordFile != "" {
			auth = append(auth, kv{Key: "password_file", Value: a.PasswordFile})
		}
		if a.PasswordEnv != "" {
			auth = append(auth, kv{Key: "password_env", Value: a.PasswordEnv})
		}
		etcd = append(etcd, kv{Key: "auth", Value: auth})
	}

	pg := m{}
	if f.Postgres.URLFile != "" {
		pg = append(pg, kv{Key: "url_file", Value: f.Postgres.URLFile})
	} else {
		pg = append(pg, kv{Key: "url_env", Value: f.Postgres.URLEnv})
	}
	pg = append(pg, kv{Key: "migrate_on_start", Value: f.Postgres.MigrateOnStart})

	jobs := make([]m, 0, len(f.Jobs))
	for _, j := range f.Jobs {
		job := m{{Key: "name", Value: j.Name}, {Key: "type", Value: j.Type}, {Key: "singleton", Value: j.Singleton}}
		s := j.Schedule
		switch s.Kind {
		case Continuous:
			job = append(job, kv{Key: "continuous", Value: true})
		case Interval:
			job = append(job, kv{Key: "every", Value: dur(s.Every)})
			if s.Jitter > 0 {
				job = append(job, kv{Key: "jitter", Value: dur(s.Jitter)})
			}
		case Cron:
			job = append(job,
				kv{Key: "cron", Value: s.Cron},
				kv{Key: "timezone", Value: s.Location.String()})
			if j.Singleton {
				job = append(job, kv{Key: "coordination", Value: s.Coordination.String()})
			}
			job = append(job, kv{Key: "catch_up", Value: s.CatchUp.String()})
			if s.CatchUp != None {
				job = append(job, kv{Key: "catch_up_window", Value: dur(s.CatchUpWindow)})
			}
		}
		job = append(job, kv{Key: "grace", Value: dur(j.Grace)})
		if j.Singleton {
			job = append(job, kv{Key: "progress_timeout", Value: dur(j.ProgressTimeout)})
		}
		if o := j.Options.checked.Effective; o != nil {
			job = append(job, kv{Key: "options", Value: o})
		}
		jobs = append(jobs, job)
	}

	doc := m{{Key: "instance", Value: f.Instance}}
	if f.Leadership.Backend == BackendKubernetes {
		doc = append(doc, kv{Key: "kubernetes", Value: kubernetesSection(f.Kubernetes)})
	} else {
		doc = append(doc, kv{Key: "etcd", Value: etcd})
	}
	doc = append(doc, m{
		{Key: "postgres", Value: pg},
		{Key: "leadership", Value: m{
			{Key: "backend", Value: string(f.Leadership.Backend)},
			{Key: "ttl", Value: dur(f.Leadership.TTL)},
			{Key: "margin", Value: dur(f.Leadership.Margin)},
			{Key: "renew_interval", Value: dur(f.Leadership.RenewInterval)},
		}},
		{Key: "http", Value: httpSection(f.HTTP)},
		{Key: "log", Value: m{{Key: "format", Value: string(f.Log.Format)}, {Key: "level", Value: strings.ToLower(f.Log.Level.String())}}},
		{Key: "shutdown_timeout", Value: dur(f.ShutdownTimeout)},
		{Key: "jobs", Value: jobs},
	}...)
	out, err := yaml.MarshalWithOptions(doc, yaml.IndentSequence(true))
	if err != nil {
		// Only an options type the YAML library cannot encode gets here.
		return fmt.Sprintf("# %s: cannot print the configuration: %v\n", f.Path, err)
	}
	return fmt.Sprintf("# effective configuration of %s (defaults filled in; secrets are never shown)\n%s", f.Path, out)
}

func httpSection(h HTTP) yaml.MapSlice {
	sec := yaml.MapSlice{{Key: "listen", Value: h.Listen}}
	if len(h.AllowedHosts) > 0 {
		sec = append(sec, yaml.MapItem{Key: "allowed_hosts", Value: h.AllowedHosts})
	}
	return sec
}

// kubernetesSection is the kubernetes section as set (in the cluster: only
// what overrides the service account's).
func kubernetesSection(k Kubernetes) yaml.MapSlice {
	sec := yaml.MapSlice{}
	for _, e := range []yaml.MapItem{
		{Key: "server", Value: k.Server}, {Key: "token_file", Value: k.TokenFile}, {Key: "ca_file", Value: k.CAFile},
		{Key: "kubeconfig", Value: k.Kubeconfig}, {Key: "context", Value: k.Context},
		{Key: "namespace", Value: k.Namespace}, {Key: "prefix", Value: k.Prefix},
	} {
		if e.Value != "" {
			sec = append(sec, e)
		}
	}
	return sec
}
