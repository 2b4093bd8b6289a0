package chaos

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// A member restarted while another process holds its port (an outgoing
// connection given it as an ephemeral port, in a fault run) waits for the
// port instead of failing: it says it is trying again, and becomes ready once
// the port is free.
func TestAMemberWaitsForItsPortToBeFree(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	ports, err := freePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	m := &etcdMember{
		name:       "m0",
		dir:        filepath.Join(dir, "etcd-m0"),
		clientURL:  "http://" + taken.Addr().String(),
		peerURL:    fmt.Sprintf("http://127.0.0.1:%d", ports[0]),
		logPath:    filepath.Join(dir, "etcd-m0.log"),
		executable: self,
	}
	m.args = []string{"--name", m.name, "--dir", m.dir, "--client", m.clientURL, "--peer", m.peerURL,
		"--initial-cluster", m.name + "=" + m.peerURL}
	ready, err := m.start(embed.ClusterStateFlagNew)
	if err != nil {
		t.Fatal(err)
	}
	defer m.kill()

	// Only once the member has found its port taken is the port freed.
	ctx, cancel := context.WithTimeout(context.Background(), memberReadyTimeout)
	defer cancel()
	for {
		b, _ := os.ReadFile(m.logPath)
		if strings.Contains(string(b), "trying again") {
			break
		}
		select {
		case err := <-ready:
			t.Fatalf("the member was ready or gone (%v) while its client port was taken; log:\n%s", err, b)
		case <-ctx.Done():
			t.Fatalf("the member never said it was trying again; log:\n%s", b)
		case <-time.After(20 * time.Millisecond):
		}
	}
	taken.Close()
	select {
	case err := <-ready:
		if err != nil {
			b, _ := os.ReadFile(m.logPath)
			t.Fatalf("the member did not start once its port was free: %v\n%s", err, b)
		}
	case <-ctx.Done():
		t.Fatal("the member was not ready within the bound")
	}
}
