package chaos

import (
	"fmt"
	"net"

	"github.com/snip/snip-jobs/testbench/freeport"
)

// freePorts returns n distinct ports that were free a moment ago, below the
// ephemeral range (freeport): a member restarted on its port after a fault
// seldom finds it taken by some outgoing connection.
func freePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := freeport.Listen()
		if err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		lns = append(lns, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
