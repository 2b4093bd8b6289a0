package service

import (
	"fmt"
	"net"
	"slices"
	"sort"
	"strings"

	"github.com/snip/snip-jobs/app/sockact"
	"github.com/snip/snip-jobs/scheduler"
)

// socketAdmin is the name of the passed socket that replaces http.listen
// (systemd's FileDescriptorName= in the .socket unit; see deploy/systemd).
const socketAdmin = "admin"

// SocketNames are the names of the sockets run takes from a service manager:
// the admin server's and those the job types' listeners declare (certrenew's
// "challenge", instead of its jobs' challenge_listen), sorted.
func SocketNames(types *scheduler.Registry) []string {
	names := append([]string{socketAdmin}, types.Sockets()...)
	slices.Sort(names)
	return slices.Compact(names)
}

// Sockets are the listening sockets the service manager passed (systemd
// socket activation), by name. A passed socket replaces the address the
// config gives for it: the port is the service manager's, held across
// restarts (port 80 for HTTP-01 without privileges, and no moment in a
// restart when the CA's validation is refused).
type Sockets map[string]net.Listener

// InheritSockets takes the passed sockets; call it first in run, as it
// clears the activation variables from the environment. An unknown name is an error: it
// is most likely a socket meant as one of ours under another name (systemd
// names an unnamed one after its unit), and listening on the config's
// address instead would fail on that very port.
func InheritSockets(types *scheduler.Registry) (Sockets, error) {
	lns, err := sockact.Inherited()
	if err != nil {
		return nil, err
	}
	known := SocketNames(types)
	var unknown []string
	for name := range lns {
		if !slices.Contains(known, name) {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		for _, ln := range lns {
			ln.Close()
		}
		return nil, fmt.Errorf("passed socket(s) %s: run takes sockets named %s (set FileDescriptorName= in the .socket unit)",
			quoteAll(unknown), quoteAll(known, " and "))
	}
	return Sockets(lns), nil
}

// take returns the socket passed under name and forgets it (nil if none).
func (s Sockets) take(name string) net.Listener {
	ln := s[name]
	delete(s, name)
	return ln
}

// quoteAll quotes names, separated by ", " (the last two by last, if given).
func quoteAll(names []string, last ...string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	if len(q) > 1 && len(last) > 0 {
		return strings.Join(q[:len(q)-1], ", ") + last[0] + q[len(q)-1]
	}
	return strings.Join(q, ", ")
}
