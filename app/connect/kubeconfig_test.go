package connect

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
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

// The files a kubeconfig names are read as every file the config names is:
// a certificate-authority that is a named pipe or /dev/zero, a client-key
// others may write, a tokenFile of 1 GiB are refused unread, by Kube (run)
// and by CheckKubeconfig (validate, which examines them without reading),
// naming the kubeconfig and the entry. Relative paths are from the
// kubeconfig's folder, as kubectl reads them; client-go never reads them
// itself (it would have blocked on the pipe, and read /dev/zero until the
// process ran out of memory).
func TestTheFilesAKubeconfigNamesAreReadOnlyIfRegularAndSmall(t *testing.T) {
	dir := t.TempDir()
	file := func(name, body string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "ca-fifo.pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	huge := file("token-huge", "", 0o600)
	if err := os.Truncate(huge, 1<<30); err != nil {
		t.Fatal(err)
	}
	file("key-shared.pem", "key", 0o666)
	file("token", "t0ken\n", 0o600)
	kubeconfig := func(name, cluster, user string) string {
		return file(name, "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://10.0.0.1:6443\""+cluster+"}}]\n"+
			"users: [{name: u, user: {"+user+"}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n", 0o600)
	}
	for _, c := range []struct{ name, cluster, user, want string }{
		{"ca-fifo", ", certificate-authority: ca-fifo.pem", "tokenFile: token",
			`certificate-authority of cluster "c" ` + filepath.Join(dir, "ca-fifo.pem") + " is a named pipe, not a regular file: a certificate file must be one (it is not read)"},
		{"ca-zero", ", certificate-authority: /dev/zero", "tokenFile: token",
			`certificate-authority of cluster "c" /dev/zero is a character device, not a regular file`},
		{"key-shared", "", "client-certificate-data: Zm9v, client-key: " + filepath.Join(dir, "key-shared.pem"),
			`client-key of user "u" ` + filepath.Join(dir, "key-shared.pem") + " is writable by its group and others (mode 0666)"},
		{"token-huge", "", "tokenFile: token-huge",
			`tokenFile of user "u" ` + huge + " holds 1073741824 bytes; a secret file may hold at most 65536 bytes"},
	} {
		k := configs.Kubernetes{Kubeconfig: kubeconfig(c.name+".yaml", c.cluster, c.user)}
		problem, unread := CheckKubeconfig(k)
		if want := "kubernetes.kubeconfig " + k.Kubeconfig + ": " + c.want; unread != nil || problem == nil || !strings.HasPrefix(problem.Error(), want) {
			t.Errorf("%s: CheckKubeconfig: %v, %v; want a problem starting %q", c.name, problem, unread, want)
		}
		_, _, _, err := Kube(&configs.File{Path: "/etc/snip-jobs.yaml", Kubernetes: k})
		if want := "kubernetes.kubeconfig " + k.Kubeconfig + " (in /etc/snip-jobs.yaml): " + c.want; err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s: Kube: %v; want an error starting %q", c.name, err, want)
		}
	}
	// The same kubeconfig naming a token file that is fine: a client.
	k := configs.Kubernetes{Kubeconfig: kubeconfig("fine.yaml", "", "tokenFile: token")}
	if problem, unread := CheckKubeconfig(k); problem != nil || unread != nil {
		t.Errorf("a kubeconfig naming a fine token file: %v, %v", problem, unread)
	}
	if _, ns, _, err := Kube(&configs.File{Path: "/etc/snip-jobs.yaml", Kubernetes: k}); err != nil || ns != "default" {
		t.Errorf("a kubeconfig naming a fine token file: namespace %q, %v", ns, err)
	}
}
