// Package systemdtest boots a Debian container whose PID 1 is a real systemd
// (systemd-nspawn), so that tests can install unit files and see what systemd
// does with them: readiness, the watchdog, restarts, credentials, sockets. It
// needs root and the Debian packages systemd-container and debootstrap; it
// works on a machine whose own PID 1 is not systemd (a CI container).
//
// What is guaranteed:
//   - Rootfs builds the root file system once into a cache folder, atomically
//     (an interrupted build is never used), and reuses it after.
//   - Boot returns once the container's systemd says its boot finished, or
//     an error carrying the console's output when it cannot boot.
//   - Nothing is left behind on the host: the container's root is a tmpfs
//     overlay over the cached tree (every write is lost at Close, the cache is
//     never changed); nspawn runs in a mount namespace of its own, with a
//     tmpfs on /run/systemd for its bookkeeping (it otherwise leaves files
//     there on a host without systemd); Close powers the container off and
//     kills whatever is left in it after a bound; and if the calling process
//     dies first, nspawn gets SIGTERM (a parent-death signal) and halts it.
//
// What is NOT provided: isolation. The container shares the host's network
// namespace (it reaches servers on the host's loopback, and a port it binds
// is bound on the host) and the host's user IDs; it is for tests.
package systemdtest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/snip/snip-jobs/testbench/pdeathsig"
)

// Bounds: how long a broken machine takes to report itself, never whether a
// working one passes.
const (
	bootTimeout  = 2 * time.Minute
	haltTimeout  = time.Minute // Close: a clean power-off before everything is killed
	killTimeout  = 30 * time.Second
	stateTimeout = time.Minute // is-system-running --wait after READY=1
)

// Container is a booted container.
type Container struct {
	Name    string
	cmd     *exec.Cmd
	leader  int    // host PID of the container's systemd
	console string // file holding nspawn's and the console's output
	sockDir string
	exited  chan struct{}

	closeOnce sync.Once
	closeErr  error
}

// Boot boots a container named name (its machine name) from root (see
// Rootfs), writing nspawn's output and the console to the file console.
func Boot(ctx context.Context, root, name, console string) (*Container, error) {
	for _, bin := range []string{"systemd-nspawn", "nsenter", "unshare"} {
		if _, err := exec.LookPath(bin); err != nil {
			return nil, fmt.Errorf("nspawn: %s is needed (Debian packages systemd-container and util-linux; .ci/run installs them): %w", bin, err)
		}
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("nspawn: booting a container needs root")
	}
	sockDir, err := os.MkdirTemp("", "nspawn-notify-")
	if err != nil {
		return nil, err
	}
	notify, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: filepath.Join(sockDir, "notify"), Net: "unixgram"})
	if err != nil {
		os.RemoveAll(sockDir)
		return nil, fmt.Errorf("nspawn: notify socket: %w", err)
	}
	defer notify.Close()
	out, err := os.Create(console)
	if err != nil {
		os.RemoveAll(sockDir)
		return nil, err
	}
	defer out.Close()
	c := &Container{Name: name, console: console, sockDir: sockDir, exited: make(chan struct{})}
	c.cmd = exec.Command("unshare", "--mount", "--propagation", "private", "--",
		"sh", "-c", `mkdir -p /run/systemd && mount -t tmpfs -o mode=0755 nspawn-run /run/systemd && exec "$@"`, "sh",
		"systemd-nspawn", "--directory="+root, "--machine="+name, "--boot",
		"--register=no", "--keep-unit", // no systemd (machined, a scope unit) on the host
		"--console=pipe", "--volatile=overlay", "--notify-ready=yes",
		// nspawn's own seccomp filter (a container's, not a host's) refuses
		// Landlock, with which exec jobs hide the service's secrets.
		"--system-call-filter=landlock_create_ruleset landlock_add_rule landlock_restrict_self")
	c.cmd.Env = append(withoutNotify(os.Environ()), "NOTIFY_SOCKET="+notify.LocalAddr().String())
	c.cmd.Stdout, c.cmd.Stderr = out, out
	if err := pdeathsig.Start(c.cmd, syscall.SIGTERM); err != nil {
		os.RemoveAll(sockDir)
		return nil, fmt.Errorf("nspawn: start systemd-nspawn: %w", err)
	}
	go func() {
		_ = c.cmd.Wait()
		close(c.exited)
	}()
	ctx, cancel := context.WithTimeout(ctx, bootTimeout)
	defer cancel()
	if err := c.waitBooted(ctx, notify); err != nil {
		closeErr := c.Close()
		return nil, errors.Join(fmt.Errorf("nspawn: container %s did not boot: %w\n--- console ---\n%s", name, err, c.Console()), closeErr)
	}
	return c, nil
}

// waitBooted reads nspawn's notifications (X_NSPAWN_LEADER_PID=, then READY=1
// once the container's systemd finished booting), then waits for the
// container's units to settle.
func (c *Container) waitBooted(ctx context.Context, notify *net.UnixConn) error {
	msgs := make(chan string)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		defer close(msgs)
		buf := make([]byte, 4096)
		for {
			n, _, err := notify.ReadFromUnix(buf)
			if err != nil {
				return
			}
			select {
			case msgs <- string(buf[:n]):
			case <-stop:
				return
			}
		}
	}()
	ready := false
	for !ready || c.leader == 0 {
		select {
		case m, ok := <-msgs:
			if !ok {
				return errors.New("the notify socket closed")
			}
			for line := range strings.Lines(m) {
				k, v, _ := strings.Cut(strings.TrimSpace(line), "=")
				switch k {
				case "READY":
					ready = v == "1"
				case "X_NSPAWN_LEADER_PID":
					c.leader, _ = strconv.Atoi(v)
				}
			}
		case <-c.exited:
			return fmt.Errorf("systemd-nspawn exited: %v", c.cmd.ProcessState)
		case <-ctx.Done():
			return fmt.Errorf("no READY=1 from the container: %w", ctx.Err())
		}
	}
	sctx, cancel := context.WithTimeout(ctx, stateTimeout)
	defer cancel()
	state, err := c.Run(sctx, "systemctl", "is-system-running", "--wait")
	state = strings.TrimSpace(state)
	if state != "running" && state != "degraded" {
		failed, _ := c.Run(ctx, "systemctl", "--failed", "--no-pager")
		return fmt.Errorf("systemctl is-system-running: %q (%v)\n%s", state, err, failed)
	}
	return nil
}

func withoutNotify(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "NOTIFY_SOCKET=") {
			out = append(out, kv)
		}
	}
	return out
}

// Leader is the host PID of the container's systemd.
func (c *Container) Leader() int { return c.leader }

// Console returns what nspawn and the container's console wrote so far.
func (c *Container) Console() string {
	b, _ := os.ReadFile(c.console)
	return string(b)
}

// Command returns a command that runs name with args inside the container
// (all its namespaces and its root, as root), like `machinectl shell`.
// Cancelling ctx kills the command inside too.
func (c *Container) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"--target", strconv.Itoa(c.leader), "--all", "--", name}, args...)...)
	// nsenter forks to enter the PID namespace and does not pass signals on.
	// Cancel kills its child, inside, first: nsenter then reaps it and ends.
	// Killed first, nsenter would orphan the child to the host's init,
	// outside the container, and the container's halt would wait out the
	// zombie (10 s). WaitDelay then ends nsenter should it linger.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return killInside(cmd.Process.Pid) }
	cmd.WaitDelay = killTimeout
	cmd.Env = withoutNotify(os.Environ())
	return cmd
}

// killInside kills the children of nsenter (pid): what it runs inside the
// container. Before nsenter has forked, it kills nsenter's process group.
func killInside(pid int) error {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	children := strings.Fields(string(b))
	if err != nil || len(children) == 0 {
		return syscall.Kill(-pid, syscall.SIGKILL)
	}
	for _, c := range children {
		if child, err := strconv.Atoi(c); err == nil {
			_ = syscall.Kill(child, syscall.SIGKILL)
		}
	}
	return nil
}

// Run runs name with args inside the container and returns its output
// (stdout and stderr); the error names the command and carries the output.
func (c *Container) Run(ctx context.Context, name string, args ...string) (string, error) {
	out, err := c.Command(ctx, name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("in container %s: %s %s: %w\n%s", c.Name, name, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// WriteFile writes data to path inside the container with mode, owned by
// root, creating its folders as mkdir -p does (mode 0755).
func (c *Container) WriteFile(ctx context.Context, path string, data []byte, mode os.FileMode) error {
	cmd := c.Command(ctx, "sh", "-c", `mkdir -p "$(dirname "$1")" && (umask 077 && cat > "$1") && chmod "$2" "$1"`,
		"sh", path, strconv.FormatUint(uint64(mode.Perm()), 8))
	cmd.Stdin = bytes.NewReader(data)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("in container %s: write %s: %w\n%s", c.Name, path, err, out)
	}
	return nil
}

// HostPID returns the host PID of the container's process pid (as the
// container sees it, e.g. systemctl's MainPID).
func (c *Container) HostPID(pid int) (int, error) {
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", c.leader))
	if err != nil {
		return 0, err
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		host, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if n, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", host)); n != ns {
			continue
		}
		if inner, ok := nsPID(host); ok && inner == pid {
			return host, nil
		}
	}
	return 0, fmt.Errorf("nspawn: no process %d in container %s", pid, c.Name)
}

// nsPID is the PID of host in its innermost PID namespace (NSpid's last field).
func nsPID(host int) (int, bool) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", host))
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "NSpid:"); ok {
			fields := strings.Fields(rest)
			if len(fields) == 0 {
				return 0, false
			}
			n, err := strconv.Atoi(fields[len(fields)-1])
			return n, err == nil
		}
	}
	return 0, false
}

// Close powers the container off (SIGTERM to nspawn: a clean halt) and waits
// for it; after haltTimeout it kills every process in the container (SIGKILL
// to its PID 1 ends its PID namespace) and nspawn. It returns an error when
// it had to kill, or nspawn did not end even then.
func (c *Container) Close() error {
	c.closeOnce.Do(func() {
		defer os.RemoveAll(c.sockDir)
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.exited:
			return
		case <-time.After(haltTimeout):
		}
		if c.leader > 0 {
			_ = syscall.Kill(c.leader, syscall.SIGKILL)
		}
		_ = c.cmd.Process.Kill()
		select {
		case <-c.exited:
			c.closeErr = fmt.Errorf("nspawn: container %s did not halt within %v: killed", c.Name, haltTimeout)
		case <-time.After(killTimeout):
			c.closeErr = fmt.Errorf("nspawn: container %s (nspawn pid %d, leader %d) still runs after SIGKILL", c.Name, c.cmd.Process.Pid, c.leader)
		}
	})
	return c.closeErr
}
