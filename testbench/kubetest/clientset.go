package kubetest

import (
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	coreclient "k8s.io/client-go/kubernetes/typed/core/v1"
	rbacclient "k8s.io/client-go/kubernetes/typed/rbac/v1"
	"k8s.io/client-go/rest"
)

// Clientset is the typed clients the tests use: Leases, namespaces and RBAC.
// Not client-go's whole clientset, which brings a client for every API group
// (and a fresh machine's compile of the suite half a minute more).
type Clientset struct {
	coord *coordclient.CoordinationV1Client
	core  *coreclient.CoreV1Client
	rbac  *rbacclient.RbacV1Client
}

// NewClientset makes the clients for cfg.
func NewClientset(cfg *rest.Config) (*Clientset, error) {
	var c Clientset
	var err error
	if c.coord, err = coordclient.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if c.core, err = coreclient.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if c.rbac, err = rbacclient.NewForConfig(cfg); err != nil {
		return nil, err
	}
	return &c, nil
}

// CoordinationV1 is the Lease API's client.
func (c *Clientset) CoordinationV1() coordclient.CoordinationV1Interface { return c.coord }

// CoreV1 is the core API's client (namespaces).
func (c *Clientset) CoreV1() coreclient.CoreV1Interface { return c.core }

// RbacV1 is the RBAC API's client (roles and bindings).
func (c *Clientset) RbacV1() rbacclient.RbacV1Interface { return c.rbac }
