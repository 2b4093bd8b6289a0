package freeport_test

import (
	"net"
	"strconv"
	"testing"

	"github.com/snip/snip-jobs/testbench/freeport"
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

// Port's port, free a moment ago, is below the ephemeral range and can be
// bound.
func TestPortIsBelowTheEphemeralRangeAndFree(t *testing.T) {
	port, err := freeport.Port()
	if err != nil {
		t.Fatal(err)
	}
	if port < freeport.Low || port >= freeport.EphemeralStart() {
		t.Errorf("port %d is outside [%d, %d)", port, freeport.Low, freeport.EphemeralStart())
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatalf("bind the port given: %v", err)
	}
	ln.Close()
}
