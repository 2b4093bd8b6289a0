// Package layout names the Kubernetes backend's Leases, checks the names a
// config file gives them (namespace, prefix, instance, job) and states the
// backend's timing rules, without linking any Kubernetes module: package
// configs checks a file with it, and only what runs the backend links
// client-go (package kubelease).
package layout

import (
	"fmt"
	"time"

	"github.com/snip/snip-jobs/leadership"
)

// DefaultPrefix starts every Lease's name unless the config says otherwise.
const DefaultPrefix = "snip-jobs"

// InstanceLease is the name of instance's Lease under prefix.
func InstanceLease(prefix, instance string) string { return prefix + "-instance-" + instance }

// JobLease is the name of job's Lease under prefix.
func JobLease(prefix, job string) string { return prefix + "-job-" + job }

// CheckNamespace, CheckPrefix, CheckInstance and CheckJob report what
// kubelease's NewSession and Campaign would refuse, so that a config file
// can be checked before anything runs (nil: accepted).
func CheckNamespace(namespace string) error {
	if msgs := isDNS1123Label(namespace); len(msgs) > 0 {
		return fmt.Errorf("kubelease: namespace %q: %v", namespace, msgs)
	}
	return nil
}

// CheckPrefix: see CheckNamespace.
func CheckPrefix(prefix string) error {
	if msgs := isValidLabelValue(prefix); len(msgs) > 0 {
		return fmt.Errorf("kubelease: prefix %q is the value of a label and starts every Lease's name: %v", prefix, msgs)
	}
	return nil
}

// CheckInstance: see CheckNamespace.
func CheckInstance(prefix, instance string) error {
	return checkName("instance", instance, InstanceLease(prefix, instance))
}

// CheckJob: see CheckNamespace.
func CheckJob(prefix, job string) error { return checkName("job", job, JobLease(prefix, job)) }

// checkName reports a job or instance name that cannot name a Lease or be a
// label value.
func checkName(what, name, lease string) error {
	if msgs := isValidLabelValue(name); len(msgs) > 0 {
		return fmt.Errorf("kubelease: %s name %q: %v", what, name, msgs)
	}
	if msgs := isDNS1123Subdomain(lease); len(msgs) > 0 {
		return fmt.Errorf("kubelease: %s name %q makes the Lease name %q: %v", what, name, lease, msgs)
	}
	return nil
}

// LabelSet labels every Lease of a set with its prefix.
const LabelSet = "jobs.snip.dev/set"

// SetSelector is the label selector of every Lease of the set prefix
// (instance and job Leases), for a reader's own list or watch.
func SetSelector(prefix string) string { return LabelSet + "=" + prefix }

// Rules are the Kubernetes backend's rules for a lease's timing: a Lease's
// duration is whole seconds (spec.leaseDurationSeconds), and the API server
// keeps Leases in an etcd of its own, whose minimum TTL and leader elections
// (etcd's defaults) bound how short a lease can safely be, as on etcd.
var Rules = leadership.Rules{
	Backend:           "the Kubernetes backend",
	MinTTL:            2 * time.Second,
	WholeSeconds:      true,
	ElectionAllowance: 2200 * time.Millisecond,
}
