package leadership

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/snip/snip-jobs/internal/boottime"
)

// Process identifies a process across hosts and PID reuse: what an instance
// writes beside its lease so that, once the process has died, its own host can
// prove it gone (a restart of the same instance, systemd's ExecStopPost=
// reclaim) and end its lease at once instead of after the TTL.
type Process struct {
	Host string
	PID  int
	// Start is the process start time from /proc/<pid>/stat (clock ticks since
	// boot): with PID it identifies the process even if the PID is reused.
	Start uint64
	// PIDNamespace names the PID namespace PID is in (/proc/self/ns/pid, e.g.
	// "pid:[4026531836]"): a PID means that process only in that namespace.
	PIDNamespace string
}

// ThisProcess is this process, on host.
func ThisProcess(host string) Process {
	pid := os.Getpid()
	start, _, _ := readProcStat(pid)
	return Process{Host: host, PID: pid, Start: start, PIDNamespace: pidNamespace()}
}

// userHZ is the unit of /proc/<pid>/stat's start time: Linux reports clock
// ticks of USER_HZ, 100 a second, whatever the kernel's own tick.
const userHZ = 100

// Since is when the process started, by this host's wall clock, to the
// hundredth of a second: for people (how long an instance has been up),
// never compared across hosts. Start counts from boot on the clock that
// goes on during a suspend, as boottime does. The zero Time when Start is
// unknown.
func (p Process) Since() time.Time {
	if p.Start == 0 {
		return time.Time{}
	}
	up := boottime.Now() - time.Duration(p.Start)*(time.Second/userHZ)
	return time.Now().Add(-up).Round(time.Second / userHZ)
}

// ErrNoProcess, ErrStillRunning, ErrOtherHost and ErrOtherPIDNamespace say
// why a process cannot be proven gone: the record names none (written by a
// release that did not record it); it runs; or this host cannot see it
// (another host's, or a PID of another PID namespace, such as a container's).
var (
	ErrNoProcess         = errors.New("leadership: the registration names no process")
	ErrStillRunning      = errors.New("leadership: the registered process is still running")
	ErrOtherHost         = errors.New("leadership: the registration is another host's")
	ErrOtherPIDNamespace = errors.New("leadership: the registration's PID is in another PID namespace")
)

// Gone reports nil when p is proven gone as seen from host, this process's
// host: same host, same PID namespace, and no running process with p's PID
// and start time. Otherwise it says why not, wrapping one of the errors above.
func (p Process) Gone(host string) error {
	switch {
	case p.PID <= 0:
		return ErrNoProcess
	case p.Host != host:
		return fmt.Errorf("%w: host %q (pid %d), this is %q", ErrOtherHost, p.Host, p.PID, host)
	case p.PIDNamespace != "" && p.PIDNamespace != pidNamespace():
		return fmt.Errorf("%w: pid %d in %s, this is %s", ErrOtherPIDNamespace, p.PID, p.PIDNamespace, pidNamespace())
	case alive(p.PID, p.Start):
		return fmt.Errorf("%w: pid %d on this host, started at tick %d", ErrStillRunning, p.PID, p.Start)
	}
	return nil
}

// alive reports whether pid is a running (not zombie) process that, when
// start is known, started at that time (so a reused pid is not mistaken for
// the predecessor).
func alive(pid int, start uint64) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	st, state, err := readProcStat(pid)
	if err != nil {
		return true // no /proc: trust kill(2)
	}
	if state == 'Z' || state == 'X' {
		return false
	}
	return start == 0 || st == start
}

// pidNamespace names this process's PID namespace ("" if unknown).
func pidNamespace() string {
	ns, _ := os.Readlink("/proc/self/ns/pid")
	return ns
}

// readProcStat reads the state (field 3) and start time (field 22) of
// /proc/<pid>/stat. The command name (field 2) is in parentheses and may contain
// spaces, so fields are counted after its closing parenthesis.
func readProcStat(pid int) (start uint64, state byte, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); field 22 is f[19].
	if len(f) < 20 || len(f[0]) != 1 {
		return 0, 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	start, err = strconv.ParseUint(f[19], 10, 64)
	return start, f[0][0], err
}
