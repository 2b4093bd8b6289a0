package kubelease_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/kubetest"
)

// api is the kube-apiserver shared by the tests that do not restart it;
// each test works in a namespace of its own.
var api *kubetest.Server

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain())
	}
	// client-go's leaderelection (the benchmarks' baseline) logs through klog.
	klog.SetLogger(logr.Discard())
	benchtest.MostlyWaiting(4) // sessions waiting out Lease durations
	var err error
	api, err = kubetest.Start(context.Background(), kubetest.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubelease tests: start kube-apiserver:", err)
		os.Exit(1)
	}
	code := benchtest.RunMain(m)
	api.Close()
	os.Exit(code)
}
