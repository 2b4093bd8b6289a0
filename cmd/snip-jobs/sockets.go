package main

import (
	"fmt"
	"net"
	"sort"
	"strings"

	"github.com/snip/snip-jobs/internal/sockact"
)

// Names of the sockets run takes from a service manager (systemd's
// FileDescriptorName= in the .socket unit; see deploy/systemd).
const (
	socketAdmin     = "admin"     // instead of http.listen
	socketChallenge = "challenge" // instead of the certrenew jobs' challenge_listen
)

// sockets are the listening sockets the service manager passed (systemd
// socket activation), by name. A passed socket replaces the address the
// config gives for it: the port is the service manager's, held across
// restarts (port 80 for HTTP-01 without privileges, and no moment in a
// restart when the CA's validation is refused).
type sockets map[string]net.Listener

// inheritSockets takes the passed sockets. An unknown name is an error: it
// is most likely a socket meant as one of ours under another name (systemd
// names an unnamed one after its unit), and listening on the config's
// address instead would fail on that very port.
func inheritSockets() (sockets, error) {
	lns, err := sockact.Inherited()
	if err != nil {
		return nil, err
	}
	var unknown []string
	for name := range lns {
		if name != socketAdmin && name != socketChallenge {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		for _, ln := range lns {
			ln.Close()
		}
		return nil, fmt.Errorf("passed socket(s) %s: run takes sockets named %q and %q (set FileDescriptorName= in the .socket unit)",
			quoteAll(unknown), socketAdmin, socketChallenge)
	}
	return sockets(lns), nil
}

// take returns the socket passed under name and forgets it (nil if none).
func (s sockets) take(name string) net.Listener {
	ln := s[name]
	delete(s, name)
	return ln
}

func quoteAll(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}
