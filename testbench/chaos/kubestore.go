package chaos

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"

	"github.com/snip/snip-jobs/internal/sleep"
	"github.com/snip/snip-jobs/testbench/etcdtlstest"
	"github.com/snip/snip-jobs/testbench/kubetest"
	"github.com/snip/snip-jobs/testbench/kubetest/kubebuild"
)

// The Kubernetes backend (Options.Backend = BackendKubernetes).
//
// What it covers: the same three `snip-jobs run` processes, jobs, load and
// checker as on etcd, with `leadership.backend: kubernetes`: their terms are
// Leases (package kubelease) on a real kube-apiserver (testbench/kubetest,
// the release's own binary), which each instance reaches through a fault
// proxy of its own, as it reaches the etcd members on the other backend, so
// a partition cuts it off from its store. The API server stores its data in
// the harness's three etcd member processes (etcd.go: TLS, authentication),
// which it reaches directly, logged in by a client certificate whose common
// name is its etcd user (kubeAPIUser). The observer watches the job Leases on
// the API server directly (kubeobserver.go): a term starts when a job Lease
// names a holder with a new token, and ends when its holder is cleared,
// replaced or the Lease deleted. Every fault kind of KubeKinds: the leaders'
// (SIGKILL with and without reclaim, SIGSTOP, partition, the slow database's
// partition, SIGTERM), etcd's beneath the API server (a member, the raft
// leader, the quorum, both followers), APIServerRestart, PostgreSQL's
// restart and the operators' controls.
//
// Its limits:
//   - One API server, not several behind a load balancer: its restart stops
//     the whole store.
//   - A Lease never expires at the API server: a holder that dies keeps its
//     job Lease until a successor takes it over, so the observer sees the old
//     term end when the new one starts (key gone = new term, handoff 0).
//   - Tokens are per job (each job Lease counts from 1), so the checker
//     names terms by job and token, and a quorum loss records each job's
//     token before it (Fault.PreLossTokens) where etcd records its revision.
//   - The admin's token (system:masters) is the instances' too: RBAC is
//     proven by package kubelease's and the manifests' tests, not here; and
//     the API server's etcd user has the root role (kubetest.Etcd says why).
type kubeStore struct {
	srv       *kubetest.Server
	leases    coordclient.LeaseInterface // the run's namespace, as the admin, directly
	tokenFile string
	version   string
}

// The run's Leases: in kubeNamespace, their names and set label starting
// with kubePrefix (package kubelease's layout).
const (
	kubeNamespace = "snip-chaos"
	kubePrefix    = "snip-chaos"
)

// kubeAPIUser is the kube-apiserver's etcd user, and its client
// certificate's common name.
const kubeAPIUser = "kube-apiserver"

// startKube starts the kube-apiserver over etcd's members (logged in by a
// client certificate of its user, created here with the root role), writes
// the admin's token where the instances read it, and creates the run's
// namespace.
func startKube(ctx context.Context, dir string, log *slog.Logger, etcd *etcdCluster) (_ *kubeStore, err error) {
	k := &kubeStore{version: kubebuild.Selected(), tokenFile: filepath.Join(dir, "kube-token")}
	cert, key, err := etcd.pki.CertUser(kubeAPIUser)
	if err != nil {
		return nil, err
	}
	gctx, cancel := context.WithTimeout(ctx, memberReadyTimeout)
	err = etcdtlstest.AddCertUser(gctx, etcd.cli, kubeAPIUser, "root")
	cancel()
	if err != nil {
		return nil, fmt.Errorf("etcd: %w", err)
	}
	opts := kubetest.Options{Log: log, Etcd: &kubetest.Etcd{Servers: etcd.endpoints(), CAFile: etcd.pki.CA, CertFile: cert, KeyFile: key}}
	if k.srv, err = kubetest.Start(ctx, opts); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			k.close()
		}
	}()
	if err := os.WriteFile(k.tokenFile, []byte(k.srv.Token()+"\n"), 0o600); err != nil {
		return nil, err
	}
	cs, err := kubetest.NewClientset(k.srv.Config())
	if err != nil {
		return nil, err
	}
	k.leases = cs.CoordinationV1().Leases(kubeNamespace)
	// The API server creates its own namespaces just after /readyz: retry
	// what races them.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: kubeNamespace}}
	for deadline := time.Now().Add(readyBound); ; {
		_, err = cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
		if err == nil || apierrors.IsAlreadyExists(err) {
			return k, nil
		}
		if time.Now().After(deadline) || !sleep.For(ctx, 200*time.Millisecond) {
			return nil, fmt.Errorf("create namespace %s: %w", kubeNamespace, err)
		}
	}
}

// jobTokens reads each job Lease's token (held or released) on the API
// server, a consistent read of etcd.
func (k *kubeStore) jobTokens(ctx context.Context) (map[string]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, etcdOpTimeout)
	defer cancel()
	l, err := k.leases.List(ctx, metav1.ListOptions{LabelSelector: kubeJobSelector})
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for i := range l.Items {
		job, t := termOf(&l.Items[i])
		out[job] = t.token
	}
	return out, nil
}

// addr is the API server's host:port, which the instances' proxies reach.
func (k *kubeStore) addr() string { return strings.TrimPrefix(k.srv.URL(), "https://") }

// section is an instance's kubernetes block: the API server through its
// proxy at proxy (the serving certificate names 127.0.0.1, any port).
func (k *kubeStore) section(proxy string) string {
	return fmt.Sprintf("kubernetes:\n  server: https://%s\n  token_file: %s\n  ca_file: %s\n  namespace: %s\n  prefix: %s\n",
		proxy, k.tokenFile, k.srv.Config().TLSClientConfig.CAFile, kubeNamespace, kubePrefix)
}

func (k *kubeStore) close() {
	if k.srv != nil {
		k.srv.Close()
	}
}

// apiserverRestart is APIServerRestart.
func (c *cluster) apiserverRestart(ctx context.Context, f *Fault) error {
	f.Target = "kube-apiserver"
	f.Start = time.Now()
	c.kube.srv.Kill()
	sleep.For(ctx, time.Second)
	err := c.kube.srv.Start(ctx)
	f.Healed = time.Now()
	return err
}
