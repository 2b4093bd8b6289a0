package kubetest

// Versions are the kube-apiserver releases the suite runs (Selected), for what
// prepares the cache before it (testbench/prepare).
func Versions() []string { return []string{Selected()} }
