package freeport_test

import (
	"net"
	"testing"

	"github.com/snip/snip-jobs/internal/freeport"
)

// Listen's ports are distinct, free and below the ephemeral range, where no
// outgoing connection is given a source port.
func TestListenGivesFreePortsBelowTheEphemeralRange(t *testing.T) {
	seen := map[int]bool{}
	for range 20 {
		ln, err := freeport.Listen()
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		port := ln.Addr().(*net.TCPAddr).Port
		if port < freeport.Low || port >= freeport.EphemeralStart() || seen[port] {
			t.Errorf("port %d: outside [%d, %d) or given twice", port, freeport.Low, freeport.EphemeralStart())
		}
		seen[port] = true
	}
}
