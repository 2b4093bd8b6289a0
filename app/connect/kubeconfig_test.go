package connect

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snip/snip-jobs/configs"
)

// A kubeconfig is refused, naming the context and the setting, when the
// context the config chooses (kubernetes.context, else the current one) is
// not there or reaches its cluster in a way kubernetes.server may not: an
// http:// server, a server without a scheme (client-go would pick plain HTTP
// for it without a CA), or insecure-skip-tls-verify. Kube refuses it before
// making a client, with the config file's name; CheckKubeconfig (validate)
// reads the same file without its credentials (the token file named in it
// does not exist here), and says when it cannot read the file at all.
func TestAKubeconfigIsRefusedWhenItsContextReachesTheServerWithoutVerifiedTLS(t *testing.T) {
	dir := t.TempDir()
	write := func(name, clusters, contexts, current string) string {
		path := filepath.Join(dir, name)
		doc := "apiVersion: v1\nkind: Config\nclusters:\n" + clusters + "users: [{name: u, user: {tokenFile: /nonexistent/token}}]\ncontexts:\n" + contexts + "current-context: " + current + "\n"
		if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	const good = "  - {name: good, cluster: {server: \"HTTPS://10.0.0.1:6443\"}}\n"
	for _, c := range []struct {
		name, cluster, context, current, want string
	}{
		{"insecure", `{server: "https://10.0.0.1:6443", insecure-skip-tls-verify: true}`, "", "c",
			`context "c" (cluster "bad"): insecure-skip-tls-verify: true turns off the check of the API server's certificate`},
		{"http", `{server: "http://10.0.0.1:8080"}`, "c", "other",
			`context "c" (cluster "bad"): server "http://10.0.0.1:8080" is plain HTTP, so the credentials would travel in clear text: write https://`},
		{"no-scheme", `{server: "10.0.0.1:6443"}`, "", "c",
			`context "c" (cluster "bad"): server "10.0.0.1:6443" must be a URL such as https://10.0.0.1:6443`},
		{"missing-context", `{server: "https://10.0.0.1:6443"}`, "nope", "c", `context "nope" is not in it`},
		{"no-context", `{server: "https://10.0.0.1:6443"}`, "", `""`, `names no current-context, and kubernetes.context is not set`},
	} {
		kc := write(c.name, good+"  - {name: bad, cluster: "+c.cluster+"}\n",
			"  - {name: c, context: {cluster: bad, user: u}}\n  - {name: other, context: {cluster: good, user: u}}\n", c.current)
		k := configs.Kubernetes{Kubeconfig: kc, Context: c.context}
		problem, unread := CheckKubeconfig(k)
		if want := "kubernetes.kubeconfig " + kc + ": " + c.want; unread != nil || problem == nil || !strings.HasPrefix(problem.Error(), want) {
			t.Errorf("%s: CheckKubeconfig: %v, %v; want a problem starting %q", c.name, problem, unread, want)
		}
		_, _, _, err := Kube(&configs.File{Path: "/etc/snip-jobs.yaml", Kubernetes: k})
		if want := "kubernetes.kubeconfig " + kc + " (in /etc/snip-jobs.yaml): " + c.want; err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s: Kube: %v; want an error starting %q", c.name, err, want)
		}
	}

	// The same file, the config choosing its good context: nothing to refuse.
	kc := write("choose-good", good+"  - {name: bad, cluster: {server: \"http://10.0.0.1:8080\", insecure-skip-tls-verify: true}}\n",
		"  - {name: c, context: {cluster: bad, user: u}}\n  - {name: other, context: {cluster: good, user: u}}\n", "c")
	if problem, unread := CheckKubeconfig(configs.Kubernetes{Kubeconfig: kc, Context: "other"}); problem != nil || unread != nil {
		t.Errorf("the good context: %v, %v", problem, unread)
	}
	if problem, unread := CheckKubeconfig(configs.Kubernetes{Kubeconfig: filepath.Join(dir, "absent")}); problem != nil || unread == nil {
		t.Errorf("a kubeconfig that cannot be read: problem %v, unread %v; want only unread", problem, unread)
	}
}
