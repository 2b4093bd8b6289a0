package etcdlocal_test

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/snip/snip-jobs/app/etcdlocal"
	"github.com/snip/snip-jobs/testbench/benchtest"
)

func start(t *testing.T, cfg etcdlocal.Config) *etcdlocal.Server {
	t.Helper()
	if cfg.Log == nil {
		cfg.Log = benchtest.Logger(t)
	}
	s, err := etcdlocal.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func client(t *testing.T, endpoint string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	return cli
}

func TestEmbeddedMemberServesOnLoopbackAndKeepsItsDataAcrossRestarts(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()

	s := start(t, etcdlocal.Config{Dir: dir, ClientAddr: "127.0.0.1:0"})
	if !strings.HasPrefix(s.Endpoint(), "http://127.0.0.1:") || strings.HasSuffix(s.Endpoint(), ":0") {
		t.Fatalf("endpoint %q: want http://127.0.0.1:<a real port>", s.Endpoint())
	}
	cli := client(t, s.Endpoint())
	put, err := cli.Put(ctx, "/snip-jobs/test", "kept")
	if err != nil {
		t.Fatal(err)
	}
	cli.Close()
	s.Close()

	// Same data directory, fresh ports: the key and its revision are still there.
	s = start(t, etcdlocal.Config{Dir: dir, ClientAddr: "127.0.0.1:0"})
	defer s.Close()
	cli = client(t, s.Endpoint())
	defer cli.Close()
	got, err := cli.Get(ctx, "/snip-jobs/test")
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "kept" || got.Kvs[0].ModRevision != put.Header.Revision {
		t.Fatalf("after restart: %v, want the value written before at revision %d", got.Kvs, put.Header.Revision)
	}
}

func TestASecondMemberOnTheSameAddressIsRefusedWithAHint(t *testing.T) {
	first := start(t, etcdlocal.Config{Dir: t.TempDir(), ClientAddr: "127.0.0.1:0"})
	defer first.Close()
	addr := strings.TrimPrefix(first.Endpoint(), "http://")

	_, err := etcdlocal.Start(context.Background(), etcdlocal.Config{Dir: t.TempDir(), ClientAddr: addr, Log: benchtest.Logger(t)})
	if err == nil || !strings.Contains(err.Error(), "already running on this host") {
		t.Fatalf("second member on %s: err = %v, want an address-in-use error with a hint", addr, err)
	}
}

func TestOnlyLoopbackAddressesAreAccepted(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:2379", "10.0.0.1:2379", ":2379", "2379"} {
		_, err := etcdlocal.Start(context.Background(), etcdlocal.Config{Dir: t.TempDir(), ClientAddr: addr})
		if err == nil {
			t.Errorf("client address %q was accepted", addr)
		}
	}
}
