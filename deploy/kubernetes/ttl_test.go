package kubernetes

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/snip/snip-jobs/leadership/kubelease/layout"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/childproc"
	"github.com/snip/snip-jobs/testbench/clitest"
	"github.com/snip/snip-jobs/testbench/freeport"
	"github.com/snip/snip-jobs/testbench/kubetest"
)

// A pod whose config has a TTL the backend refuses exits 2 before it
// campaigns, with the problem at its file:line:col: what kubectl logs and,
// through terminationMessagePolicy: FallbackToLogsOnError, kubectl describe
// pod show. The ConfigMap's config runs as the pod would, but reaching a
// real kube-apiserver from outside the cluster: as written, the process
// takes its instance Lease (so the API server is reachable and the refusal
// below is the config's); with ttl 1500ms it exits 2 and no Lease was
// written.
func TestAConfigWithATTLTheBackendRefusesExitsBeforeItCampaigns(t *testing.T) {
	t.Parallel()
	srv := kubetest.Shared(t)
	dir := t.TempDir()
	text := asPod(t, configText(t, load(t)))
	leases := clientset(t, srv).CoordinationV1()

	okNS := srv.Namespace(t)
	okPath := filepath.Join(dir, "ok.yaml")
	write(t, okPath, outsideTheCluster(t, srv, dir, text, okNS))
	p, err := childproc.Start(childproc.Spec{Path: snipJobs, Args: []string{"run", "--config", okPath}, Log: filepath.Join(dir, "ok.log")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	lease := layout.InstanceLease(layout.DefaultPrefix, podName)
	kubetest.WaitLeases(t, leases, okNS, "the instance Lease of the config as written", func() bool {
		_, err := leases.Leases(okNS).Get(context.Background(), lease, metav1.GetOptions{})
		return err == nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), benchtest.Patience)
	defer cancel()
	if err := p.Stop(ctx, benchtest.Patience); err != nil {
		t.Errorf("the process as written did not stop on SIGTERM: %v", err)
	}

	badNS := srv.Namespace(t)
	bad := replaceOnce(t, outsideTheCluster(t, srv, dir, text, badNS), "  ttl: 10s\n", "  ttl: 1500ms\n")
	badPath := filepath.Join(dir, "bad.yaml")
	write(t, badPath, bad)
	r := clitest.Run(t, snipJobs, nil, "run", "--config", badPath)
	line := 1 + strings.Count(bad[:strings.Index(bad, "ttl: 1500ms")], "\n")
	want := badPath + ":" + strconv.Itoa(line) + ":"
	if r.Code != 2 || !strings.Contains(r.Stderr, want) || !strings.Contains(r.Stderr, "TTL 1.5s is below the Kubernetes backend's minimum") {
		t.Errorf("run with ttl 1500ms: exit %d, stderr %q; want 2 and the TTL's problem at %s", r.Code, r.Stderr, want)
	}
	list, err := leases.Leases(badNS).List(context.Background(), metav1.ListOptions{})
	if err != nil || len(list.Items) != 0 {
		t.Errorf("Leases after the refused config: %v (%v), want none: it must not campaign", list, err)
	}
}

// outsideTheCluster is the config text reaching srv's API server in
// namespace ns with a token file, instead of the pod's service account;
// reading the Secret's files from dir (a database that does not answer: run
// waits for it, and campaigns meanwhile; a sealing key); and listening on
// free loopback ports instead of the pod's.
func outsideTheCluster(t *testing.T, srv *kubetest.Server, dir, text, ns string) string {
	t.Helper()
	token, url, keys := filepath.Join(dir, "token"), filepath.Join(dir, "database-url"), filepath.Join(dir, "certificate-keys")
	write(t, token, srv.Token())
	write(t, url, "postgres://snip@127.0.0.1:1/snip?sslmode=disable&connect_timeout=1")
	key := make([]byte, 32)
	rand.Read(key)
	write(t, keys, base64.StdEncoding.EncodeToString(key)+"\n")
	text = replaceOnce(t, text, "\nkubernetes:\n", "\nkubernetes:\n  server: "+srv.URL()+"\n  token_file: "+token+
		"\n  ca_file: "+srv.Config().TLSClientConfig.CAFile+"\n  namespace: "+ns+"\n")
	text = replaceOnce(t, text, "url_file: /var/run/secrets/snip-jobs/database-url\n", "url_file: "+url+"\n")
	text = strings.ReplaceAll(text, "/var/run/secrets/snip-jobs/certificate-keys", keys)
	text = replaceOnce(t, text, `listen: ":9469"`, `listen: "`+freePort(t)+`"`)
	text = replaceOnce(t, text, `challenge_listen: ":8080"`, `challenge_listen: "`+freePort(t)+`"`)
	return strings.ReplaceAll(text, "dir: /var/lib/snip-certs", "dir: "+filepath.Join(dir, "certs"))
}

func freePort(t *testing.T) string {
	t.Helper()
	p, err := freeport.Port()
	if err != nil {
		t.Fatal(err)
	}
	return "127.0.0.1:" + strconv.Itoa(p)
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func clientset(t *testing.T, srv *kubetest.Server) *kubetest.Clientset {
	t.Helper()
	cs, err := kubetest.NewClientset(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	return cs
}
