package kubelease

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation"
)

// InstanceLeaseName is the name of instance's Lease under prefix.
func InstanceLeaseName(prefix, instance string) string {
	return Config{Prefix: prefix}.instanceLease(instance)
}

// SetSelector is the label selector of every Lease of the set prefix
// (instance and job Leases), for a reader's own list or watch.
func SetSelector(prefix string) string { return Config{Prefix: prefix}.setSelector() }

// CheckNamespace, CheckPrefix, CheckInstance and CheckJob report what
// NewSession and Campaign would refuse, so that a config file can be checked
// before anything runs (nil: accepted).
func CheckNamespace(namespace string) error {
	if msgs := validation.IsDNS1123Label(namespace); len(msgs) > 0 {
		return fmt.Errorf("kubelease: namespace %q: %v", namespace, msgs)
	}
	return nil
}

// CheckPrefix: see CheckNamespace.
func CheckPrefix(prefix string) error {
	if msgs := validation.IsValidLabelValue(prefix); len(msgs) > 0 {
		return fmt.Errorf("kubelease: prefix %q is the value of a label and starts every Lease's name: %v", prefix, msgs)
	}
	return nil
}

// CheckInstance: see CheckNamespace.
func CheckInstance(prefix, instance string) error {
	c := Config{Prefix: prefix}
	return c.checkName("instance", instance, c.instanceLease(instance))
}

// CheckJob: see CheckNamespace.
func CheckJob(prefix, job string) error {
	c := Config{Prefix: prefix}
	return c.checkName("job", job, c.jobLease(job))
}
