package configs_test

import (
	"strings"
	"testing"

	"github.com/snip/snip-jobs/configs"
)

// With leadership.backend: kubernetes, each bad value is reported alone at
// its line, in words that say what is wrong and what to write instead.
func TestEachKubernetesBackendProblemIsReportedAtItsLine(t *testing.T) {
	cases := []struct {
		name   string
		file   []byte
		line   int
		phrase string
		job    string
	}{
		{"unknown backend", lines(
			"leadership:",
			"  backend: zookeeper",
		), 2, `leadership.backend "zookeeper" must be etcd or kubernetes`, ""},
		{"an etcd section with the kubernetes backend", lines(
			"instance: a",
			"etcd:",
			"  endpoints: [https://10.0.0.1:2379]",
			"leadership:",
			"  backend: kubernetes",
		), 2, "etcd applies only to leadership.backend: etcd, and this file's is kubernetes (line 5): remove this section", ""},
		{"a kubernetes section with the default backend", lines(
			"instance: a",
			"kubernetes:",
			"  namespace: snip",
		), 2, "kubernetes applies only to leadership.backend: kubernetes (this file's is etcd, the default)", ""},
		{"a kubernetes section with backend etcd written", lines(
			"instance: a",
			"leadership: {backend: etcd}",
			"kubernetes: {namespace: snip}",
		), 3, "(this file's is etcd at line 2)", ""},
		{"server over plain HTTP", lines(
			"instance: a",
			"leadership: {backend: kubernetes}",
			"kubernetes:",
			"  server: http://10.0.0.1:6443",
			"  token_file: /etc/snip-jobs/kube-token",
			"  namespace: snip",
		), 4, `kubernetes.server "http://10.0.0.1:6443" is plain HTTP, so the bearer token would travel in clear text: write https://`, ""},
		{"server not a URL", lines(
			"instance: a",
			"leadership: {backend: kubernetes}",
			"kubernetes:",
			"  server: 10.0.0.1:6443",
			"  token_file: /etc/snip-jobs/kube-token",
			"  namespace: snip",
		), 4, "must be a URL such as https://10.0.0.1:6443", ""},
		{"server with a path", lines(
			"instance: a",
			"leadership: {backend: kubernetes}",
			"kubernetes:",
			"  server: https://10.0.0.1:6443/api",
			"  token_file: /etc/snip-jobs/kube-token",
			"  namespace: snip",
		), 4, "must be just https://host:port", ""},
		{"server without token_file", lines(
			"instance: a",
			"leadership: {backend: kubernetes}",
			"kubernetes:",
			"  namespace: snip",
			"  server: https://10.0.0.1:6443",
		), 5, "kubernetes.server is set without token_file: name the file holding the bearer token", ""},
		{"server without namespace", lines(
			"instance: a",
			"leadership: {backend: kubernetes}",
			"kubernetes:",
			"  server: https://10.0.0.1:6443",
			"  token_file: /etc/snip-jobs/kube-token",
		), 4, "kubernetes.server is set without namespace: name the namespace of the Leases", ""},
		{"token_file without server", lines(
			"instance: a",
			"leadership: {backend: kubernetes}",
			"kubernetes:",
			"  token_file: /etc/snip-jobs/kube-token",
		), 4, "kubernetes.token_file applies only with kubernetes.server", ""},
		{"ca_file relative", lines(
			"instance: a",
			"leadership: {backend: kubernetes}",
			"kubernetes:",
			"  server: https://10.0.0.1:6443",
			"  token_file: /etc/snip-jobs/kube-token",
			"  ca_file: kube-ca.pem",
			"  namespace: snip",
		), 6, `kubernetes.ca_file "kube-ca.pem" must be an absolute path`, ""},
		{"kubeconfig and server", lines(
			"instance: a",
			"leadership: {backend: kubernetes}",
			"kubernetes:",
			"  server: https://10.0.0.1:6443",
			"  token_file: /etc/snip-jobs/kube-token",
			"  namespace: snip",
			"  kubeconfig: /etc/snip-jobs/kubeconfig",
		), 7, "kubernetes.kubeconfig and kubernetes.server both say how to reach the API server: keep one", ""},
		{"kubeconfig relative", lines(
			"instance: a",
			"leadership: {backend: kubernetes}",
			"kubernetes:",
			"  kubeconfig: kubeconfig",
		), 4, `kubernetes.kubeconfig "kubeconfig" must be an absolute path`, ""},
		{"context without kubeconfig", lines(
			"instance: a",
			"leadership: {backend: kubernetes}",
			"kubernetes:",
			"  context: prod",
		), 4, "kubernetes.context picks a context of kubernetes.kubeconfig", ""},
		{"namespace that cannot be one", lines(
			"instance: a",
			"leadership: {backend: kubernetes}",
			"kubernetes:",
			"  namespace: Snip_Jobs",
		), 4, `kubernetes.namespace "Snip_Jobs"`, ""},
		{"prefix that cannot be a label value", lines(
			"instance: a",
			"leadership: {backend: kubernetes}",
			"kubernetes:",
			"  prefix: snip/jobs",
		), 4, `kubernetes.prefix "snip/jobs" is the value of a label`, ""},
		{"unknown key in kubernetes", lines(
			"instance: a",
			"leadership: {backend: kubernetes}",
			"kubernetes:",
			"  token: abc",
		), 4, `unknown key "token" in kubernetes`, ""},
		{"instance that cannot name a Lease", lines(
			"instance: Server_1",
			"leadership: {backend: kubernetes}",
		), 1, `instance name "Server_1" makes the Lease name "snip-jobs-instance-Server_1"`, ""},
		{"singleton whose name is too long for a label value", lines(
			"instance: a",
			"leadership: {backend: kubernetes}",
			"jobs:",
			"  - name: "+strings.Repeat("a", 64),
			"    type: aggregator",
			"    continuous: true",
		), 4, "(leadership.backend: kubernetes names a Lease after it)", strings.Repeat("a", 64)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			errs := problems(t, c.file)
			if len(errs) != 1 {
				t.Errorf("got %d problems, want only this one:%s", len(errs), dump(errs))
			}
			e := findProblem(errs, c.line, c.phrase)
			if e == nil {
				t.Fatalf("no problem at line %d containing %q; got:%s", c.line, c.phrase, dump(errs))
			}
			if e.Job != c.job {
				t.Errorf("problem names job %q, want %q: %s", e.Job, c.job, e)
			}
			if !strings.HasPrefix(e.Error(), "test.yaml:") {
				t.Errorf("problem does not start with the file name: %s", e)
			}
		})
	}
}

// The kubernetes backend needs no etcd section; explicit settings are kept
// as written, in-cluster ones left for the service account; the same long
// job name is fine with etcd; --print's output parses back to the same.
func TestTheKubernetesBackendIsReadWithItsSection(t *testing.T) {
	long := strings.Repeat("a", 64)
	explicit := mustParse(t, lines(
		"instance: server-1",
		"leadership:",
		"  backend: kubernetes",
		"  ttl: 4s",
		"kubernetes:",
		"  server: https://10.0.0.1:6443",
		"  token_file: /etc/snip-jobs/kube-token",
		"  ca_file: /etc/snip-jobs/kube-ca.pem",
		"  namespace: snip",
		"  prefix: snip-prod",
	))
	want := configs.Kubernetes{Server: "https://10.0.0.1:6443", TokenFile: "/etc/snip-jobs/kube-token",
		CAFile: "/etc/snip-jobs/kube-ca.pem", Namespace: "snip", Prefix: "snip-prod"}
	if explicit.Leadership.Backend != configs.BackendKubernetes || explicit.Kubernetes != want || explicit.Kubernetes.InCluster() {
		t.Errorf("got %+v %+v, want backend kubernetes and %+v", explicit.Leadership, explicit.Kubernetes, want)
	}
	if sf := explicit.Files(); len(sf) != 2 || sf[0].Key != "kubernetes.token_file" || sf[0].Path != want.TokenFile || sf[0].Holds != configs.Secret ||
		sf[1].Key != "kubernetes.ca_file" || sf[1].Path != want.CAFile || sf[1].Holds != configs.Certificates {
		t.Errorf("files %+v, want the token file (a secret) and the CA file (certificates)", sf)
	}
	printed := explicit.Redacted()
	if strings.Contains(printed, "etcd:") || !strings.Contains(printed, "backend: kubernetes") {
		t.Errorf("--print of a kubernetes config:\n%s", printed)
	}
	again := mustParse(t, []byte(printed))
	if again.Kubernetes != want || again.Leadership != explicit.Leadership {
		t.Errorf("printed and parsed again: %+v %+v\n%s", again.Leadership, again.Kubernetes, printed)
	}

	inCluster := mustParse(t, lines("instance: server-1", "leadership: {backend: kubernetes}"))
	if !inCluster.Kubernetes.InCluster() || inCluster.Kubernetes.Namespace != "" || inCluster.Kubernetes.Prefix != "snip-jobs" {
		t.Errorf("in the cluster: %+v", inCluster.Kubernetes)
	}

	etcd := mustParse(t, lines("instance: Server_1", "jobs:", "  - name: "+long, "    type: aggregator", "    continuous: true"))
	if etcd.Leadership.Backend != configs.BackendEtcd {
		t.Errorf("default backend %q, want etcd", etcd.Leadership.Backend)
	}
}
