package configs

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/snip/snip-jobs/leadership/kubelease/layout"
)

// readKubernetes reads the kubernetes section, which only leadership.backend:
// kubernetes uses (backendPos is where the backend is written, zero when it is
// not): either server with token_file (ca_file optional) and namespace, or a
// kubeconfig (context optional), or none of those (in the cluster, as the
// service account).
func readKubernetes(top *mapping, backend Backend, backendPos Pos) Kubernetes {
	k := Kubernetes{Prefix: layout.DefaultPrefix}
	if backend != BackendKubernetes && top.has("kubernetes") {
		said := "etcd, the default"
		if backendPos.Line > 0 {
			said = fmt.Sprintf("%s at line %d", backend, backendPos.Line)
		}
		top.errorf(top.keyPos("kubernetes"), "kubernetes applies only to leadership.backend: kubernetes (this file's is %s): set it, or remove this section", said)
	}
	m := top.sub("kubernetes")
	if s, ok := m.str("server"); ok {
		if msg := checkKubeServer(s); msg != "" {
			m.errorf(m.valuePos("server"), "kubernetes.server %q %s", s, msg)
		} else {
			k.Server = s
		}
	}
	if f, ok := m.str("token_file"); ok && absPath(m, "token_file", f) {
		k.TokenFile = f
	}
	if f, ok := m.str("ca_file"); ok && absPath(m, "ca_file", f) {
		k.CAFile = f
	}
	if f, ok := m.str("kubeconfig"); ok && absPath(m, "kubeconfig", f) {
		k.Kubeconfig = f
	}
	if c, ok := m.str("context"); ok {
		k.Context = c
	}
	if ns, ok := m.str("namespace"); ok {
		if err := layout.CheckNamespace(ns); err != nil {
			m.errorf(m.valuePos("namespace"), "kubernetes.%s", kubeMsg(err))
		} else {
			k.Namespace = ns
		}
	}
	if prefix, ok := m.str("prefix"); ok {
		if err := layout.CheckPrefix(prefix); err != nil {
			m.errorf(m.valuePos("prefix"), "kubernetes.%s", kubeMsg(err))
		} else {
			k.Prefix = prefix
		}
	}
	kubeCombinations(m)
	m.finish()
	return k
}

// kubeCombinations refuses keys of one way to reach the API server written with
// another, or without what they need.
func kubeCombinations(m *mapping) {
	if m.has("server") {
		for key, what := range map[string]string{"token_file": "the file holding the bearer token", "namespace": "the namespace of the Leases"} {
			if !m.has(key) {
				m.errorf(m.keyPos("server"), "kubernetes.server is set without %s: name %s (only in the cluster is it the service account's)", key, what)
			}
		}
	}
	for _, key := range []string{"token_file", "ca_file"} {
		if m.has(key) && !m.has("server") {
			m.errorf(m.keyPos(key), "kubernetes.%s applies only with kubernetes.server (in the cluster the service account's is used): set server, or remove it", key)
		}
	}
	if m.has("kubeconfig") && m.has("server") {
		m.errorf(m.keyPos("kubeconfig"), "kubernetes.kubeconfig and kubernetes.server both say how to reach the API server: keep one")
	}
	if m.has("context") && !m.has("kubeconfig") {
		m.errorf(m.keyPos("context"), "kubernetes.context picks a context of kubernetes.kubeconfig: set kubeconfig, or remove it")
	}
}

// checkKubeServer returns what is wrong with an API server's URL, or "".
func checkKubeServer(s string) string {
	u, err := url.Parse(s)
	switch {
	case err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http"):
		return "must be a URL such as https://10.0.0.1:6443"
	case u.Scheme != "https":
		return "is plain HTTP, so the bearer token would travel in clear text: write https://"
	case (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil:
		return "must be just https://host:port"
	}
	return ""
}

// checkLeaseNames checks that the instance and the jobs led through terms make
// valid Lease names (package kubelease names a Lease after each).
func checkLeaseNames(top *mapping, f *File) {
	const why = " (leadership.backend: kubernetes names a Lease after it)"
	if f.Instance != "" {
		if err := layout.CheckInstance(f.Kubernetes.Prefix, f.Instance); err != nil {
			if top.has("instance") {
				top.errorf(top.valuePos("instance"), "%s%s", kubeMsg(err), why)
			} else {
				top.errorf(top.at, "instance is not set and the host name cannot be used: %s%s; set instance", kubeMsg(err), why)
			}
		}
	}
	for _, j := range f.Jobs {
		if j.Mode() != ModeLeader || !jobName.MatchString(j.Name) {
			continue
		}
		if err := layout.CheckJob(f.Kubernetes.Prefix, j.Name); err != nil {
			top.doc.errorf(j.Pos, j.Name, "%s%s", kubeMsg(err), why)
		}
	}
}

// kubeMsg is a kubelease error in a config file's words.
func kubeMsg(err error) string { return strings.TrimPrefix(err.Error(), "kubelease: ") }
