// Package kubernetes holds no code: its tests check the manifests beside
// them. Every object is sent to a real kube-apiserver (the suite's, package
// kubetest) with server-side dry-run and strict field validation, and the
// pod of the Deployment is checked by the API server's Pod Security
// admission (apply_test.go); the manifests are checked against the config
// example, the config parser with the built-in job types, and the
// snip-jobs binary (drift_test.go); and a config whose TTL the backend
// refuses is shown to stop the binary before it campaigns (ttl_test.go).
// The Role is proven sufficient and confined by
// leadership/kubelease/rbac_test.go, from the same files.
package kubernetes

import (
	"os"
	"strings"
	"testing"

	"github.com/snip/snip-jobs/testbench/clitest"
	"github.com/snip/snip-jobs/testbench/kubemanifest"
)

// snipJobs is the snip-jobs binary, built once by TestMain.
var snipJobs string

func TestMain(m *testing.M) {
	os.Exit(clitest.Main(m, clitest.Binary{Pkg: "../../cmd/snip-jobs", Name: "snip-jobs", Path: &snipJobs}))
}

// podName is a name of the form the Deployment's pods get, which the
// config leaves the instance name to (a pod's host name is its name).
const podName = "snip-jobs-6d5f7c9b8-x7k2p"

// load reads this folder's manifests.
func load(t *testing.T) *kubemanifest.Set {
	t.Helper()
	set, err := kubemanifest.Load(".")
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// configKey is the ConfigMap's key: the config's file name in the pods.
const configKey = "snip-jobs.yaml"

// configText is the config the ConfigMap holds, as the pods read it.
func configText(t *testing.T, set *kubemanifest.Set) string {
	t.Helper()
	cm, err := set.Only("ConfigMap")
	if err != nil {
		t.Fatal(err)
	}
	data := cm.Object["data"].(map[string]any)
	if len(data) != 1 {
		t.Fatalf("ConfigMap %s holds %d keys, want one: the config", cm.GetName(), len(data))
	}
	for key, v := range data {
		if key != configKey {
			t.Fatalf("ConfigMap %s's key is %q, want %s", cm.GetName(), key, configKey)
		}
		return v.(string)
	}
	panic("unreachable")
}

// asPod is the config as a pod of the Deployment reads it: its instance is
// the pod's host name, which configs falls back to; a test must not depend
// on this machine's host name.
func asPod(t *testing.T, config string) string {
	t.Helper()
	if strings.Contains("\n"+config, "\ninstance:") {
		t.Fatal("the ConfigMap's config names an instance: every pod would have that name, and all but one would refuse to start")
	}
	return "instance: " + podName + "\n" + config
}

// replaceOnce replaces old with new in s, failing unless old occurs once.
func replaceOnce(t *testing.T, s, old, new string) string {
	t.Helper()
	if n := strings.Count(s, old); n != 1 {
		t.Fatalf("%q occurs %d times in the config, want once", old, n)
	}
	return strings.Replace(s, old, new, 1)
}
