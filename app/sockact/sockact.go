// Package sockact hands listening sockets to a child process the way
// systemd's socket activation does (sd_listen_fds(3): the sockets as file
// descriptors 3, 4, …, with LISTEN_FDS, LISTEN_FDNAMES and LISTEN_PID in the
// environment), so that a supervisor owning the ports — snip-dev, the
// fault-injection harness, the tests — can start, kill and restart a
// `snip-jobs run` process exactly as systemd does in production.
//
// The guarantee: the port is bound once, by the supervisor, and stays bound
// across the child's restarts; nothing else can take it in between. That
// closes the race of "find a free port, close it, let the child bind it",
// which loses whenever another process (or an outgoing connection's ephemeral
// port) takes the port in the gap — seen as "address already in use" at
// start-up in CI, with the test suite's packages running side by side.
//
// The limit is systemd's too: while no child runs, the kernel still accepts
// connections on the port into its backlog, where they wait (rather than
// being refused) until the next child serves them or they time out.
package sockact

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"

	"github.com/coreos/go-systemd/v22/activation"
)

// Socket is one listening socket to pass, under the name the child looks it
// up by (systemd's FileDescriptorName=).
type Socket struct {
	Name     string
	Listener *net.TCPListener
}

// Pass arranges for cmd, not yet started, to receive socks as file
// descriptors 3, 4, … with the environment systemd would set. LISTEN_PID must
// be the child's own pid, unknown until it runs: the command therefore goes
// through /bin/sh, which exports its pid ($$) and then execs the program in
// its place (same pid, same signals, same parent-death signal). The program
// must be a path (exec.Command resolves a bare name; cmd.Path is used).
//
// Pass returns the duplicated descriptors it put in cmd.ExtraFiles: close
// them once cmd has started (the child has its own copies, and the caller
// keeps its listeners).
func Pass(cmd *exec.Cmd, socks ...Socket) ([]*os.File, error) {
	if cmd.Process != nil {
		return nil, errors.New("sockact: the command has started already")
	}
	if len(cmd.ExtraFiles) > 0 {
		return nil, errors.New("sockact: the command has extra files already; the sockets must be descriptors 3 onwards")
	}
	if cmd.Err != nil {
		return nil, fmt.Errorf("sockact: %w", cmd.Err)
	}
	names := make([]string, 0, len(socks))
	files := make([]*os.File, 0, len(socks))
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	for _, s := range socks {
		if s.Name == "" || strings.ContainsAny(s.Name, ":\n") {
			closeAll()
			return nil, fmt.Errorf("sockact: socket name %q: must be non-empty, without ':' or newlines", s.Name)
		}
		f, err := s.Listener.File() // a duplicate; the listener stays ours
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("sockact: socket %q: %w", s.Name, err)
		}
		names = append(names, s.Name)
		files = append(files, f)
	}
	env := cmd.Env
	if env == nil {
		env = os.Environ()
	}
	cmd.Env = append(withoutActivation(env),
		fmt.Sprintf("LISTEN_FDS=%d", len(socks)),
		"LISTEN_FDNAMES="+strings.Join(names, ":"))
	cmd.ExtraFiles = files
	// sh -c 'script' arg0 args…: "$0" "$@" is the program and its arguments.
	cmd.Args = append([]string{"/bin/sh", "-c", `LISTEN_PID=$$; export LISTEN_PID; exec "$0" "$@"`, cmd.Path}, cmd.Args[1:]...)
	cmd.Path = "/bin/sh"
	return files, nil
}

// withoutActivation drops any socket-activation variables env already has
// (this process may itself have been started by systemd).
func withoutActivation(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if strings.HasPrefix(kv, "LISTEN_PID=") || strings.HasPrefix(kv, "LISTEN_FDS=") || strings.HasPrefix(kv, "LISTEN_FDNAMES=") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// Listen binds a TCP listener on addr ("127.0.0.1:0" for a free port) for a
// supervisor to keep and pass.
func Listen(addr string) (*net.TCPListener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("sockact: listen on %s: %w", addr, err)
	}
	return ln.(*net.TCPListener), nil
}

// Inherited returns the listening sockets this process was passed (by
// systemd, or by a parent through Pass), by name, and removes the activation
// variables from the environment so that a child of this process does not
// take them for its own. It returns an empty map when none were passed (or
// LISTEN_PID names another process). Two sockets under one name, or a passed
// descriptor that is not a listening socket, is an error that says which.
func Inherited() (map[string]net.Listener, error) {
	files := activation.Files(true)
	out := make(map[string]net.Listener, len(files))
	var errs []error
	for i, f := range files {
		ln, err := net.FileListener(f) // a duplicate: f is closed below
		name := f.Name()
		f.Close()
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("passed descriptor %d (%s) is not a listening socket: %w", 3+i, name, err))
		case out[name] != nil:
			ln.Close()
			errs = append(errs, fmt.Errorf("two passed sockets are named %q (descriptors up to %d); give each its own FileDescriptorName=", name, 3+i))
		default:
			out[name] = ln
		}
	}
	if err := errors.Join(errs...); err != nil {
		for _, ln := range out {
			ln.Close()
		}
		return nil, fmt.Errorf("sockact: %w", err)
	}
	return out, nil
}
