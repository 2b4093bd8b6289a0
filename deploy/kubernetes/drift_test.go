package kubernetes

import (
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/jobs/builtin"
	"github.com/snip/snip-jobs/testbench/clitest"
	"github.com/snip/snip-jobs/testbench/kubemanifest"
)

// kustomization.yaml lists every manifest of this folder, and names the
// namespace that every object names itself (so that kustomize's namespace:
// changes nothing as written, and the objects the tests apply are the ones
// kubectl apply -k sends).
func TestTheKustomizationListsEveryManifestInItsNamespace(t *testing.T) {
	set := load(t)
	files, err := filepath.Glob("*.y*ml")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if f != "kustomization.yaml" && !slices.Contains(set.Kustomization.Resources, f) {
			t.Errorf("%s is not listed in kustomization.yaml's resources: kubectl apply -k would leave it out", f)
		}
	}
	ns := set.Kustomization.Namespace
	if ns == "" {
		t.Fatal("kustomization.yaml names no namespace")
	}
	for _, o := range set.Objects {
		switch {
		case o.GetKind() == "Namespace" && o.GetName() != ns:
			t.Errorf("%s: Namespace %s, but the kustomization's is %s", o.File, o.GetName(), ns)
		case o.GetKind() != "Namespace" && o.GetNamespace() != ns:
			t.Errorf("%s: %s %s is in namespace %q, the kustomization's is %s", o.File, o.GetKind(), o.GetName(), o.GetNamespace(), ns)
		}
	}
}

// The objects refer to each other by the names they have: the binding to
// the Role and the account, the pods to the account, the ConfigMap and
// the Secret, the budget and the Service to the pods' labels.
func TestTheManifestsReferToEachOther(t *testing.T) {
	set := load(t)
	var (
		sa      corev1.ServiceAccount
		role    rbacv1.Role
		binding rbacv1.RoleBinding
		dep     appsv1.Deployment
		pdb     policyv1.PodDisruptionBudget
		svc     corev1.Service
		cm      corev1.ConfigMap
	)
	typed(t, set, map[string]any{"ServiceAccount": &sa, "Role": &role, "RoleBinding": &binding, "Deployment": &dep,
		"PodDisruptionBudget": &pdb, "Service": &svc, "ConfigMap": &cm})
	if binding.RoleRef.Kind != "Role" || binding.RoleRef.Name != role.Name {
		t.Errorf("RoleBinding %s binds %s %s, want Role %s", binding.Name, binding.RoleRef.Kind, binding.RoleRef.Name, role.Name)
	}
	if len(binding.Subjects) != 1 || binding.Subjects[0].Kind != "ServiceAccount" || binding.Subjects[0].Name != sa.Name ||
		binding.Subjects[0].Namespace != sa.Namespace {
		t.Errorf("RoleBinding %s binds %+v, want ServiceAccount %s/%s", binding.Name, binding.Subjects, sa.Namespace, sa.Name)
	}
	pod := dep.Spec.Template
	if pod.Spec.ServiceAccountName != sa.Name {
		t.Errorf("the pods run as %q, want %s", pod.Spec.ServiceAccountName, sa.Name)
	}
	for what, sel := range map[string]*metav1.LabelSelector{"the Deployment": dep.Spec.Selector, "the PodDisruptionBudget": pdb.Spec.Selector,
		"the challenge Service": {MatchLabels: svc.Spec.Selector}} {
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil || s.Empty() || !s.Matches(labels.Set(pod.Labels)) {
			t.Errorf("%s selects %v, which does not select the pods (%v): %v", what, sel, pod.Labels, err)
		}
	}
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		vols[v.Name] = v
	}
	found := false
	for _, v := range vols {
		found = found || v.ConfigMap != nil && v.ConfigMap.Name == cm.Name
	}
	if !found {
		t.Errorf("no volume of the pods is ConfigMap %s", cm.Name)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort != intstr.FromString("challenge") || port(t, dep, "challenge") == 0 {
		t.Errorf("the challenge Service's ports %+v: want one, to the pods' port named challenge", svc.Spec.Ports)
	}
}

// The ConfigMap's config is the example's with the kubernetes backend: the
// same jobs, valid for the config parser with the job types built into
// snip-jobs, and for `snip-jobs validate` itself.
func TestTheConfigMapHoldsTheExampleConfigOnTheKubernetesBackend(t *testing.T) {
	set := load(t)
	text := asPod(t, configText(t, set))
	f, err := configs.Parse("configmap.yaml:snip-jobs.yaml", []byte(text), builtin.Registry())
	if err != nil {
		t.Fatalf("the ConfigMap's config does not pass the config parser:\n%v", err)
	}
	if f.Leadership.Backend != configs.BackendKubernetes || !f.Kubernetes.InCluster() {
		t.Errorf("backend %s (in the cluster: %v), want kubernetes as the pod's service account", f.Leadership.Backend, f.Kubernetes.InCluster())
	}
	example, err := configs.Load(filepath.Join("..", "..", "configs", "snip-jobs.example.yaml"), builtin.Registry())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := jobNames(f), jobNames(example); !slices.Equal(got, want) {
		t.Errorf("the ConfigMap's jobs are %v, the example's %v", got, want)
	}
	path := filepath.Join(t.TempDir(), "snip-jobs.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := clitest.Run(t, snipJobs, nil, "validate", "--config", path); r.Code != 0 {
		t.Errorf("snip-jobs validate: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
}

// The Deployment's pods are what the config needs: stopped after
// shutdown_timeout, not before; ready by the admin listener's /readyz, on a
// port the kubelet reaches and no probe that kills; the config where run
// reads it; every secret file it names in the Secret's volume, as the
// documentation tells the operator to create it, with --allow-readable-secrets
// for the group-readable files Kubernetes makes of a Secret.
func TestTheDeploymentAgreesWithTheConfig(t *testing.T) {
	set := load(t)
	f, err := configs.Parse("snip-jobs.yaml", []byte(asPod(t, configText(t, set))), builtin.Registry())
	if err != nil {
		t.Fatal(err)
	}
	var dep appsv1.Deployment
	typed(t, set, map[string]any{"Deployment": &dep})
	pod := dep.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	if g := pod.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second <= f.ShutdownTimeout {
		t.Errorf("terminationGracePeriodSeconds %s, want above shutdown_timeout %v (the kubelet's SIGKILL would cut the hand-over short)",
			deref(g), f.ShutdownTimeout)
	}
	checkProbes(t, dep, c, f.HTTP.Listen)
	checkConfigMount(t, pod, c)
	checkSecrets(t, pod, c, f)
}

// checkProbes: readiness on /readyz of the admin listener, which listens
// where the kubelet reaches it; no liveness or startup probe.
func checkProbes(t *testing.T, dep appsv1.Deployment, c corev1.Container, listen string) {
	t.Helper()
	host, listenPort, err := net.SplitHostPort(listen)
	if err != nil {
		t.Fatalf("http.listen %q: %v", listen, err)
	}
	if ip := net.ParseIP(host); host == "localhost" || ip != nil && ip.IsLoopback() {
		t.Errorf("http.listen %q is loopback: the kubelet probes the pod's IP address", listen)
	}
	p := c.ReadinessProbe
	if p == nil || p.HTTPGet == nil {
		t.Fatal("no HTTP readiness probe")
	}
	probed := p.HTTPGet.Port.IntValue()
	if p.HTTPGet.Port.Type == intstr.String {
		probed = port(t, dep, p.HTTPGet.Port.StrVal)
	}
	if p.HTTPGet.Path != "/readyz" || listenPort != strconv.Itoa(probed) || p.HTTPGet.Scheme == corev1.URISchemeHTTPS {
		t.Errorf("readiness probe %s %v, want /readyz on http.listen's port %s over HTTP", p.HTTPGet.Path, p.HTTPGet.Port.String(), listenPort)
	}
	if c.LivenessProbe != nil || c.StartupProbe != nil {
		t.Error("a liveness or startup probe: the kubelet would restart a leader in the middle of its term " +
			"(docs/kubernetes.md argues against it; change both if you must)")
	}
}

// checkConfigMount: the ConfigMap's key is mounted where run reads its config
// by default (as the binary's --help says), and run is given no other.
func checkConfigMount(t *testing.T, pod corev1.PodSpec, c corev1.Container) {
	t.Helper()
	help := clitest.Run(t, snipJobs, nil, "run", "--help")
	m := regexp.MustCompile(`-config string\n[^\n]*\(default "([^"]+)"\)`).FindStringSubmatch(help.Stdout + help.Stderr)
	if m == nil {
		t.Fatalf("run --help does not say where the config is read by default:\n%s%s", help.Stdout, help.Stderr)
	}
	want := m[1]
	if slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--config") || strings.HasPrefix(a, "-config") }) {
		t.Errorf("args %v name a config: the test reads it at the default path, %s", c.Args, want)
	}
	for _, e := range c.Env {
		if e.Name == "SNIP_JOBS_CONFIG" {
			t.Errorf("SNIP_JOBS_CONFIG is set: the test reads the config at the default path, %s", want)
		}
	}
	vm, v := mountOf(t, pod, c, filepath.Dir(want))
	if v.ConfigMap == nil || len(v.ConfigMap.Items) > 0 || vm.SubPath != "" {
		t.Errorf("%s is not the whole ConfigMap's volume (items and subPath would stop updates)", vm.MountPath)
	}
	if filepath.Base(want) != configKey {
		t.Errorf("run reads %s by default, but the ConfigMap's key is %s", want, configKey)
	}
}

// checkSecrets: every secret file the config names is a key of the Secret's
// volume, which docs/kubernetes.md tells the operator to create, mounted
// readable by the pod's group only, and run accepts that group-readable file.
func checkSecrets(t *testing.T, pod corev1.PodSpec, c corev1.Container, f *configs.File) {
	t.Helper()
	docs, err := os.ReadFile(filepath.Join("..", "..", "docs", "kubernetes.md"))
	if err != nil {
		t.Fatal(err)
	}
	badMode := map[string]bool{}
	for _, n := range f.Files() {
		if n.Holds == configs.Certificates {
			continue
		}
		vm, v := mountOf(t, pod, c, filepath.Dir(n.Path))
		if v.Secret == nil {
			t.Errorf("%s (%s) is not in a Secret's volume but in %s", n.Path, n.Key, vm.Name)
			continue
		}
		if m := v.Secret.DefaultMode; (m == nil || *m != 0o440) && !badMode[v.Name] {
			badMode[v.Name] = true
			t.Errorf("Secret volume %s's defaultMode %s (octal), want 0440: the owner and the pod's fsGroup read it, nobody writes", v.Name, octal(m))
		}
		key := filepath.Base(n.Path)
		if !strings.Contains(string(docs), "--from-file="+key+"=") {
			t.Errorf("%s reads key %s of Secret %s, which docs/kubernetes.md's kubectl create secret does not name", n.Key, key, v.Secret.SecretName)
		}
	}
	if pod.SecurityContext == nil || pod.SecurityContext.FSGroup == nil {
		t.Error("no fsGroup: the non-root container could not read the Secret's files")
	}
	if !slices.Contains(c.Args, "--allow-readable-secrets") {
		t.Errorf("args %v: without --allow-readable-secrets run refuses the Secret's group-readable files", c.Args)
	}
}

func deref(p *int64) string {
	if p == nil {
		return "unset"
	}
	return strconv.FormatInt(*p, 10)
}

func octal(p *int32) string {
	if p == nil {
		return "unset"
	}
	return strconv.FormatInt(int64(*p), 8)
}

// mountOf is the container's volume mount at dir, and its volume.
func mountOf(t *testing.T, pod corev1.PodSpec, c corev1.Container, dir string) (corev1.VolumeMount, corev1.Volume) {
	t.Helper()
	for _, vm := range c.VolumeMounts {
		if vm.MountPath != dir {
			continue
		}
		for _, v := range pod.Volumes {
			if v.Name == vm.Name {
				return vm, v
			}
		}
		t.Fatalf("mount %s names volume %s, which the pod does not have", dir, vm.Name)
	}
	t.Fatalf("nothing is mounted at %s", dir)
	panic("unreachable")
}

// port is the container port named name.
func port(t *testing.T, dep appsv1.Deployment, name string) int {
	t.Helper()
	for _, c := range dep.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == name {
				return int(p.ContainerPort)
			}
		}
	}
	t.Errorf("no container port named %s", name)
	return 0
}

func typed(t *testing.T, set *kubemanifest.Set, into map[string]any) {
	t.Helper()
	for kind, v := range into {
		o, err := set.Only(kind)
		if err == nil {
			err = o.Typed(v)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func jobNames(f *configs.File) []string {
	var names []string
	for _, j := range f.Jobs {
		names = append(names, j.Name)
	}
	return names
}
