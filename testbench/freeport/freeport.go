// Package freeport gives test servers a free loopback TCP port that stays
// theirs while they restart: one below the kernel's ephemeral range. A port
// picked by listening on port 0 lies inside that range, and once its server
// stops, any outgoing connection on the machine (a database pool's, another
// test binary's) may be given it as its source port and hold it for as long
// as it lives, so the server's restart on the same port fails.
//
// What is guaranteed: Listen's port was free when it returned, and no
// connect() without an explicit bind is ever given it. What is NOT: another
// process that binds ports below the range on purpose may take it while the
// server is stopped.
//
// Test-only: the production binary must not import it.
package freeport

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// Ports are picked at random from [Low, the ephemeral range's start).
const Low = 10000

// Listen listens on a random free port below the ephemeral
// range, or on any free port when that range starts too low to leave room.
func Listen() (net.Listener, error) {
	high := EphemeralStart()
	if high-Low < 1000 {
		return net.Listen("tcp", "127.0.0.1:0")
	}
	var err error
	for range 100 {
		port := Low + rand.IntN(high-Low)
		var ln net.Listener
		if ln, err = net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
			return ln, nil
		}
	}
	return nil, err
}

// EphemeralStart is the first port of the kernel's ephemeral range (Linux's
// default when it cannot be read).
func EphemeralStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	low, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return low
}

// Port is a port below the ephemeral range that was free a moment ago, for
// a server that binds it itself (a child process) and again after a restart.
func Port() (int, error) {
	ln, err := Listen()
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
