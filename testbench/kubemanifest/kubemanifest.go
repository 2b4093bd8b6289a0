// Package kubemanifest reads the Kubernetes manifests of deploy/kubernetes
// for the tests that apply them to a real kube-apiserver: the files that
// kustomization.yaml lists, each of its YAML documents an object, as
// written.
//
// What is guaranteed: Load reads exactly the files kustomization.yaml lists,
// in its order, and fails on a file that is missing or holds a document
// without apiVersion, kind or name. InNamespace moves a copy of the set into
// another namespace as kustomize's namespace: does (every object's
// metadata.namespace, the Namespace object's name, and the namespace of a
// RoleBinding's ServiceAccount subjects that were in the set's namespace,
// which kustomize updates through its name reference), so that tests can
// run in namespaces of their own. What is NOT: kustomize itself. Its other
// transforms (images) are not applied, and the set is what the files say;
// the tests check that the kustomization's namespace is every object's own,
// so that kustomize's move is a no-op on the files as written.
//
// Test-only: the production binary must not import it.
package kubemanifest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"

	"github.com/snip/snip-jobs/testbench/gobuild"
)

// Kustomization is the part of kustomization.yaml the tests read.
type Kustomization struct {
	Namespace string   `json:"namespace"`
	Resources []string `json:"resources"`
	Images    []struct {
		Name    string `json:"name"`
		NewName string `json:"newName"`
		NewTag  string `json:"newTag"`
	} `json:"images"`
}

// Object is one object of the set and the file it is written in.
type Object struct {
	File string // relative to the set's folder
	*unstructured.Unstructured
}

// Set is the manifests of one folder.
type Set struct {
	Dir           string
	Kustomization Kustomization
	Objects       []Object
}

// Dir is the module's deploy/kubernetes.
func Dir() (string, error) {
	root, err := gobuild.ModuleRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "deploy", "kubernetes"), nil
}

// Load reads dir's kustomization.yaml and every file it lists.
func Load(dir string) (*Set, error) {
	s := &Set{Dir: dir}
	docs, err := decodeFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		return nil, err
	}
	if len(docs) != 1 {
		return nil, fmt.Errorf("kubemanifest: kustomization.yaml holds %d documents, want 1", len(docs))
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(docs[0], &s.Kustomization); err != nil {
		return nil, fmt.Errorf("kubemanifest: kustomization.yaml: %w", err)
	}
	for _, f := range s.Kustomization.Resources {
		docs, err := decodeFile(filepath.Join(dir, f))
		if err != nil {
			return nil, err
		}
		for i, d := range docs {
			u := &unstructured.Unstructured{Object: d}
			if u.GetAPIVersion() == "" || u.GetKind() == "" || u.GetName() == "" {
				return nil, fmt.Errorf("kubemanifest: %s, document %d: no apiVersion, kind or metadata.name", f, i+1)
			}
			s.Objects = append(s.Objects, Object{File: f, Unstructured: u})
		}
	}
	return s, nil
}

// decodeFile decodes every non-empty YAML document of path.
func decodeFile(path string) ([]map[string]any, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("kubemanifest: %w", err)
	}
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	var out []map[string]any
	for {
		var m map[string]any
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("kubemanifest: %s: %w", path, err)
		}
		if len(m) > 0 {
			out = append(out, m)
		}
	}
}

// Find returns the object of kind named name.
func (s *Set) Find(kind, name string) (Object, error) {
	for _, o := range s.Objects {
		if o.GetKind() == kind && o.GetName() == name {
			return o, nil
		}
	}
	return Object{}, fmt.Errorf("kubemanifest: no %s %q in %s", kind, name, s.Dir)
}

// Only returns the one object of kind.
func (s *Set) Only(kind string) (Object, error) {
	var found []Object
	for _, o := range s.Objects {
		if o.GetKind() == kind {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		return Object{}, fmt.Errorf("kubemanifest: %d objects of kind %s in %s, want 1", len(found), kind, s.Dir)
	}
	return found[0], nil
}

// Typed converts o into a typed object (a *rbacv1.Role, an *appsv1.Deployment).
func (o Object) Typed(into any) error {
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, into); err != nil {
		return fmt.Errorf("kubemanifest: %s %s in %s: %w", o.GetKind(), o.GetName(), o.File, err)
	}
	return nil
}

// InNamespace is a copy of the set moved into namespace ns, as kustomize's
// namespace: moves it (see the package comment).
func (s *Set) InNamespace(ns string) *Set {
	from := s.Kustomization.Namespace
	out := &Set{Dir: s.Dir, Kustomization: s.Kustomization}
	out.Kustomization.Namespace = ns
	for _, o := range s.Objects {
		u := o.DeepCopy()
		switch {
		case u.GetKind() == "Namespace":
			u.SetName(ns)
		default:
			u.SetNamespace(ns)
		}
		if u.GetKind() == "RoleBinding" {
			moveSubjects(u, from, ns)
		}
		out.Objects = append(out.Objects, Object{File: o.File, Unstructured: u})
	}
	return out
}

// moveSubjects moves a RoleBinding's ServiceAccount subjects of namespace
// from into to.
func moveSubjects(u *unstructured.Unstructured, from, to string) {
	subjects, _, _ := unstructured.NestedSlice(u.Object, "subjects")
	for _, s := range subjects {
		m, ok := s.(map[string]any)
		if ok && m["kind"] == "ServiceAccount" && m["namespace"] == from {
			m["namespace"] = to
		}
	}
	unstructured.SetNestedSlice(u.Object, subjects, "subjects")
}
