package kubelease

// InstanceLeaseName is the name of instance's Lease under prefix.
func InstanceLeaseName(prefix, instance string) string {
	return Config{Prefix: prefix}.instanceLease(instance)
}

// SetSelector is the label selector of every Lease of the set prefix
// (instance and job Leases), for a reader's own list or watch.
func SetSelector(prefix string) string { return Config{Prefix: prefix}.setSelector() }
