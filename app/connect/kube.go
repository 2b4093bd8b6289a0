package connect

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/snip/snip-jobs/configs"
)

// Kube is a client of the Kubernetes API server that holds the Leases, the
// namespace they are in, and where that is, for messages: kubernetes.server
// with token_file (re-read as it changes, for rotated tokens) and ca_file; or
// kubernetes.kubeconfig (fromKubeconfig); or, without either, the pod's
// service account (rest.InClusterConfig) and, unless kubernetes.namespace
// says otherwise, the namespace it runs in. Every file the config names, and
// every file its kubeconfig names, is read through configs.ReadFile (a
// regular file no larger than its kind may be), never by client-go. Nothing
// is contacted yet.
func Kube(f *configs.File) (_ coordclient.CoordinationV1Interface, namespace, where string, _ error) {
	k := f.Kubernetes
	var rc *rest.Config
	var err error
	namespace = k.Namespace
	switch {
	case k.InCluster():
		rc, namespace, err = inCluster(f)
	case k.Kubeconfig != "":
		rc, namespace, err = fromKubeconfig(k, f.Path)
	default:
		rc, err = fromServer(k)
	}
	if err != nil {
		return nil, "", "", err
	}
	rc.UserAgent = "snip-jobs " + f.Instance
	rc.QPS = -1 // kubelease refuses a throttled client: see its Config.Client
	cs, err := coordclient.NewForConfig(rc)
	if err != nil {
		return nil, "", "", fmt.Errorf("kubernetes client for %s: %w", rc.Host, err)
	}
	return cs, namespace, fmt.Sprintf("%s, namespace %s", rc.Host, namespace), nil
}

// inCluster is the pod's service account's client configuration, and the
// namespace of the Leases: kubernetes.namespace, else the pod's.
func inCluster(f *configs.File) (*rest.Config, string, error) {
	rc, err := rest.InClusterConfig()
	if err != nil {
		return nil, "", fmt.Errorf("kubernetes: %s sets no kubernetes.server, and this process cannot use a pod's service account: %w "+
			"(set kubernetes.server, token_file and namespace to run outside the cluster)", f.Path, err)
	}
	if f.Kubernetes.Namespace != "" {
		return rc, f.Kubernetes.Namespace, nil
	}
	b, err := os.ReadFile(serviceAccountNamespace)
	if err != nil {
		return nil, "", fmt.Errorf("kubernetes: the service account's namespace: %w (or set kubernetes.namespace in %s)", err, f.Path)
	}
	return rc, strings.TrimSpace(string(b)), nil
}

// fromServer is the client configuration of kubernetes.server, token_file
// and ca_file. The token is read once now, for an error naming the setting
// rather than a failed request later, and again as it changes (bearerFile).
func fromServer(k configs.Kubernetes) (*rest.Config, error) {
	token := configs.NamedFile{Key: "kubernetes.token_file", Path: k.TokenFile}
	if _, err := (fileToken{token}).Token(); err != nil {
		return nil, err
	}
	rc := &rest.Config{Host: k.Server, WrapTransport: bearerFile(token)}
	if k.CAFile != "" {
		ca, err := configs.ReadFile(configs.NamedFile{Key: "kubernetes.ca_file", Path: k.CAFile, Holds: configs.Certificates})
		if err != nil {
			return nil, err
		}
		rc.TLSClientConfig.CAData = ca
	}
	return rc, nil
}

// fromKubeconfig loads the client configuration of k.Kubeconfig's context
// (k.Context, or its current one) and the namespace of the Leases:
// kubernetes.namespace, else the context's, else "default". A context whose
// cluster is reached without TLS, or without checking the server's
// certificate, is refused (kubeconfigTransport), as kubernetes.server is.
// The files the context names are read into it (kubeconfigFiles), its token
// file by bearerFile.
func fromKubeconfig(k configs.Kubernetes, path string) (*rest.Config, string, error) {
	fail := func(err error) (*rest.Config, string, error) {
		return nil, "", fmt.Errorf("kubernetes.kubeconfig %s (in %s): %w", k.Kubeconfig, path, err)
	}
	data, err := readKubeconfig(k)
	if err != nil {
		return nil, "", err
	}
	raw, err := clientcmd.Load(data)
	if err == nil {
		err = kubeconfigTransport(raw, k.Context)
	}
	if err != nil {
		return fail(err)
	}
	token, err := readKubeconfigFiles(raw, k)
	if err != nil {
		return fail(err)
	}
	cc := clientcmd.NewNonInteractiveClientConfig(*raw, k.Context, &clientcmd.ConfigOverrides{CurrentContext: k.Context}, nil)
	rc, err := cc.ClientConfig()
	if err == nil {
		err = restTransport(rc)
	}
	if err != nil {
		return fail(err)
	}
	if token != nil {
		rc.WrapTransport = bearerFile(*token)
	}
	namespace := k.Namespace
	if namespace == "" {
		if namespace, _, err = cc.Namespace(); err != nil {
			return nil, "", fmt.Errorf("kubernetes.kubeconfig %s: the context's namespace: %w (or set kubernetes.namespace in %s)", k.Kubeconfig, err, path)
		}
	}
	return rc, namespace, nil
}

// readKubeconfig reads kubernetes.kubeconfig.
func readKubeconfig(k configs.Kubernetes) ([]byte, error) {
	return configs.ReadFile(configs.NamedFile{Key: "kubernetes.kubeconfig", Path: k.Kubeconfig, Holds: configs.Kubeconfig})
}

// CheckKubeconfig reads kubernetes.kubeconfig as Kube would, without its
// credentials and contacting nothing, for validate: problem is what Kube
// would refuse in it (a context that is not there, a cluster reached over
// plain HTTP or with insecure-skip-tls-verify, a file it names that is not a
// regular file or is larger than it may be), worded as Kube words it
// without the config file's name; unread says why the file could not be
// read here (validate may run where the config is written, not where its
// secret files are), and then nothing was checked. The files the kubeconfig
// names are examined, not read; one that is not here is not a problem.
func CheckKubeconfig(k configs.Kubernetes) (problem, unread error) {
	if k.Kubeconfig == "" {
		return nil, nil
	}
	data, err := readKubeconfig(k)
	if err != nil {
		return nil, err
	}
	raw, err := clientcmd.Load(data)
	if err == nil {
		err = kubeconfigTransport(raw, k.Context)
	}
	if err == nil {
		err = examineKubeconfigFiles(raw, k)
	}
	if err != nil {
		return fmt.Errorf("kubernetes.kubeconfig %s: %w", k.Kubeconfig, err), nil
	}
	return nil, nil
}

// kubeconfigTransport refuses a kubeconfig whose chosen context (context,
// else its current one) is missing or names a cluster that would take the
// credentials without TLS (a server that is not https://) or to a server
// whose certificate is not checked (insecure-skip-tls-verify): the rules of
// kubernetes.server, in the kubeconfig's words.
func kubeconfigTransport(raw *clientcmdapi.Config, context string) error {
	name, c, err := chosenContext(raw, context)
	if err != nil {
		return err
	}
	cl, ok := raw.Clusters[c.Cluster]
	if !ok || cl == nil {
		return fmt.Errorf("context %q: its cluster %q is not in it", name, c.Cluster)
	}
	where := fmt.Sprintf("context %q (cluster %q)", name, c.Cluster)
	u, err := url.Parse(cl.Server)
	switch {
	case cl.InsecureSkipTLSVerify:
		return fmt.Errorf("%s: insecure-skip-tls-verify: true turns off the check of the API server's certificate, "+
			"so the credentials would go to whoever answers at %s: remove it (and name the server's CA with certificate-authority)", where, cl.Server)
	case err == nil && u.Scheme == "http":
		return fmt.Errorf("%s: server %q is plain HTTP, so the credentials would travel in clear text: write https://", where, cl.Server)
	case err != nil || u.Scheme != "https" || u.Host == "":
		return fmt.Errorf("%s: server %q must be a URL such as https://10.0.0.1:6443", where, cl.Server)
	}
	return nil
}

// chosenContext is the kubeconfig's context that the config chooses
// (context, else its current one), and its name.
func chosenContext(raw *clientcmdapi.Config, context string) (string, *clientcmdapi.Context, error) {
	name := context
	if name == "" {
		name = raw.CurrentContext
	}
	if name == "" {
		return "", nil, errors.New("names no current-context, and kubernetes.context is not set: set one of them")
	}
	c, ok := raw.Contexts[name]
	if !ok || c == nil {
		return "", nil, fmt.Errorf("context %q is not in it", name)
	}
	return name, c, nil
}

// restTransport is kubeconfigTransport's rule on the client configuration
// client-go made of the kubeconfig, in case anything but the cluster's own
// settings (client-go's defaults) made it insecure.
func restTransport(rc *rest.Config) error {
	u, _, err := rest.DefaultServerUrlFor(rc)
	switch {
	case err != nil:
		return err
	case rc.Insecure:
		return fmt.Errorf("the client would not check the API server's certificate (%s)", rc.Host)
	case u.Scheme != "https":
		return fmt.Errorf("the client would reach the API server over plain HTTP (%s)", u)
	}
	return nil
}

// serviceAccountNamespace is the namespace of a pod's service account.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
