// Command kubeapi-binary prints the path of the kube-apiserver the tests run
// (testbench/kubetest.Selected: kubetest.Version, or the release that
// SNIP_KUBE_APISERVER names), building it into the user cache first when it
// is missing or not that version. .ci/run calls it before `go test` (once
// for each release it tests), so that a first build (about 8½ minutes and
// 2.7 GiB of memory on two busy cores for v1.37.2) is a step of its own and
// not a test that runs into go test's timeout.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"

	"github.com/snip/snip-jobs/testbench/kubetest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	bin, err := kubetest.Binary(ctx, kubetest.Selected())
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubeapi-binary:", err)
		os.Exit(1)
	}
	fmt.Println(bin)
}
