package configs

import (
	"fmt"
	"strings"

	"github.com/goccy/go-yaml"
)

// Redacted returns the effective configuration, defaults included, as YAML in the
// file's own format (for `snip-jobs validate --print`). Secrets are not in a File
// at all; only where they are read from is printed.
func (f *File) Redacted() string {
	type m = yaml.MapSlice
	jobs := make([]m, 0, len(f.Jobs))
	for _, j := range f.Jobs {
		jobs = append(jobs, jobSection(j))
	}
	doc := m{{Key: "instance", Value: f.Instance}}
	if f.Leadership.Backend == BackendKubernetes {
		doc = append(doc, yaml.MapItem{Key: "kubernetes", Value: kubernetesSection(f.Kubernetes)})
	} else {
		doc = append(doc, yaml.MapItem{Key: "etcd", Value: etcdSection(f.Etcd)})
	}
	doc = append(doc, m{
		{Key: "postgres", Value: postgresSection(f.Postgres)},
		{Key: "leadership", Value: m{
			{Key: "backend", Value: string(f.Leadership.Backend)},
			{Key: "ttl", Value: fmtDuration(f.Leadership.TTL)},
			{Key: "margin", Value: fmtDuration(f.Leadership.Margin)},
			{Key: "renew_interval", Value: fmtDuration(f.Leadership.RenewInterval)},
		}},
		{Key: "http", Value: httpSection(f.HTTP)},
		{Key: "log", Value: m{{Key: "format", Value: string(f.Log.Format)}, {Key: "level", Value: strings.ToLower(f.Log.Level.String())}}},
		{Key: "shutdown_timeout", Value: fmtDuration(f.ShutdownTimeout)},
		{Key: "jobs", Value: jobs},
	}...)
	out, err := yaml.MarshalWithOptions(doc, yaml.IndentSequence(true))
	if err != nil {
		// Only an options type the YAML library cannot encode gets here.
		return fmt.Sprintf("# %s: cannot print the configuration: %v\n", f.Path, err)
	}
	return fmt.Sprintf("# effective configuration of %s (defaults filled in; secrets are never shown)\n%s", f.Path, out)
}

// etcdSection is the etcd section: the embedded member's folder or the
// endpoints, with TLS and authentication when set (the password's source only).
func etcdSection(e Etcd) yaml.MapSlice {
	type kv = yaml.MapItem
	type m = yaml.MapSlice
	etcd := m{}
	if e.Embedded() {
		etcd = append(etcd, kv{Key: "endpoints", Value: []string{}}, kv{Key: "embedded_dir", Value: e.EmbeddedDir})
	} else {
		etcd = append(etcd, kv{Key: "endpoints", Value: e.Endpoints})
	}
	etcd = append(etcd, kv{Key: "prefix", Value: e.Prefix}, kv{Key: "dial_timeout", Value: fmtDuration(e.DialTimeout)})
	if t := e.TLS; t != (TLS{}) {
		tls := m{}
		for _, it := range []kv{{Key: "ca", Value: t.CA}, {Key: "cert", Value: t.Cert}, {Key: "key", Value: t.Key}} {
			if it.Value != "" {
				tls = append(tls, it)
			}
		}
		etcd = append(etcd, kv{Key: "tls", Value: tls})
	}
	if a := e.Auth; a.User != "" {
		auth := m{{Key: "user", Value: a.User}}
		if a.PasswordFile != "" {
			auth = append(auth, kv{Key: "password_file", Value: a.PasswordFile})
		}
		if a.PasswordEnv != "" {
			auth = append(auth, kv{Key: "password_env", Value: a.PasswordEnv})
		}
		etcd = append(etcd, kv{Key: "auth", Value: auth})
	}
	return etcd
}

// postgresSection names where the database URL is read from, never the URL.
func postgresSection(p Postgres) yaml.MapSlice {
	pg := yaml.MapSlice{}
	if p.URLFile != "" {
		pg = append(pg, yaml.MapItem{Key: "url_file", Value: p.URLFile})
	} else {
		pg = append(pg, yaml.MapItem{Key: "url_env", Value: p.URLEnv})
	}
	return append(pg, yaml.MapItem{Key: "migrate_on_start", Value: p.MigrateOnStart})
}

// jobSection is one entry of the jobs list: its schedule's keys only, and the
// options its type kept (Checked.Effective).
func jobSection(j Job) yaml.MapSlice {
	type kv = yaml.MapItem
	dur := fmtDuration
	job := yaml.MapSlice{{Key: "name", Value: j.Name}, {Key: "type", Value: j.Type}, {Key: "singleton", Value: j.Singleton}}
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
	return job
}

// httpSection is the admin listener, and its allowed host names when set.
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
