package leadership

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Registration is what an instance writes under <prefix>/instances/<name>, on its
// lease, so that peers and operators can see who is up, and a restarted process
// can tell whether its predecessor is still running.
type Registration struct {
	Instance string    `json:"instance"`
	Host     string    `json:"host"`
	PID      int       `json:"pid"`
	Started  time.Time `json:"started"` // wall clock, for people; never compared
	// ProcStart is the process start time from /proc/<pid>/stat (clock ticks since
	// boot): with PID it identifies the process even if the PID is reused.
	ProcStart uint64 `json:"proc_start,omitempty"`
	// PIDNamespace names the PID namespace PID is in (/proc/self/ns/pid, e.g.
	// "pid:[4026531836]"): a PID means that process only in that namespace.
	PIDNamespace string `json:"pid_ns,omitempty"`
	Lease        int64  `json:"lease"`
}

// DuplicateInstanceError means another live process already uses this instance
// name. The session stops: two processes with one name would reclaim each other's
// leases.
type DuplicateInstanceError struct {
	Instance string
	Existing Registration
	SameHost bool
}

func (e *DuplicateInstanceError) Error() string {
	if e.SameHost {
		return fmt.Sprintf("leadership: instance %q is already running on this host as pid %d (since %s); "+
			"stop it first, or give this process another instance name",
			e.Instance, e.Existing.PID, e.Existing.Started.Format(time.RFC3339))
	}
	return fmt.Sprintf("leadership: instance name %q is registered by host %q (pid %d, since %s); "+
		"every server needs its own instance name. If %q is gone, its registration expires with its lease",
		e.Instance, e.Existing.Host, e.Existing.PID, e.Existing.Started.Format(time.RFC3339), e.Existing.Host)
}

// maxRegisterAttempts bounds the create / reclaim / create loop against a
// registration that keeps reappearing (a race with another starting process).
const maxRegisterAttempts = 5

// register writes this instance's registration on lease l (create-if-absent).
// A registration left on a lease this session held before is replaced. One left
// by a dead process of this instance on this host is reclaimed: its lease is
// revoked, which also deletes its leader keys, so its jobs move at once instead of
// after a TTL. Anything else is a DuplicateInstanceError.
func (s *Session) register(ctx context.Context, l *lease) error {
	key := InstanceKey(s.cfg.Prefix, s.cfg.Instance)
	pid := os.Getpid()
	procStart, _ := processStart(pid)
	me, err := json.Marshal(Registration{
		Instance: s.cfg.Instance, Host: s.cfg.Host, PID: pid, Started: time.Now(),
		ProcStart: procStart, PIDNamespace: pidNamespace(), Lease: int64(l.id),
	})
	if err != nil {
		return err
	}
	for range maxRegisterAttempts {
		resp, err := s.cfg.Client.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, string(me), clientv3.WithLease(l.id))).
			Else(clientv3.OpGet(key)).
			Commit()
		if err != nil {
			return fmt.Errorf("register instance %q: %w", s.cfg.Instance, err)
		}
		if resp.Succeeded {
			return nil
		}
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			continue // deleted in between
		}
		kv := kvs[0]
		old := clientv3.LeaseID(kv.Lease)
		if old == l.id {
			return nil // our own write, whose answer we lost
		}
		var prev Registration
		if err := json.Unmarshal(kv.Value, &prev); err != nil {
			return fmt.Errorf("register instance %q: unreadable registration at %s: %w", s.cfg.Instance, key, err)
		}
		switch {
		case s.heldBefore(old):
			// Left by this session's previous lease, which it could not revoke.
		case prev.Host != s.cfg.Host:
			return &DuplicateInstanceError{Instance: s.cfg.Instance, Existing: prev}
		case processAlive(prev.PID, prev.ProcStart):
			return &DuplicateInstanceError{Instance: s.cfg.Instance, Existing: prev, SameHost: true}
		default:
			s.log.Info("predecessor process is gone; revoking its lease so its jobs move now",
				"pid", prev.PID, "lease", kv.Lease, "since", prev.Started)
			s.stats.add(&s.stats.reclaimed, 1)
		}
		if err := s.revoke(ctx, old); err != nil {
			return fmt.Errorf("register instance %q: revoke lease %x of the previous registration: %w", s.cfg.Instance, kv.Lease, err)
		}
	}
	return fmt.Errorf("register instance %q: registration keeps reappearing; is another process starting with this name?", s.cfg.Instance)
}

// processAlive reports whether pid is a running (not zombie) process that, when
// procStart is known, started at that time (so a reused pid is not mistaken for
// the predecessor).
func processAlive(pid int, procStart uint64) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	start, state, err := readProcStat(pid)
	if err != nil {
		return true // no /proc: trust kill(2)
	}
	if state == 'Z' || state == 'X' {
		return false
	}
	return procStart == 0 || start == procStart
}

// pidNamespace names this process's PID namespace ("" if unknown).
func pidNamespace() string {
	ns, _ := os.Readlink("/proc/self/ns/pid")
	return ns
}

// processStart is the start time of pid in clock ticks since boot (Linux).
func processStart(pid int) (uint64, error) {
	start, _, err := readProcStat(pid)
	return start, err
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

// Deregister removes this instance's registration while keeping its lease and
// terms: peers stop counting it as up. A process shutting down calls it before
// resigning its terms, so that the instances taking them over do not wait for
// it (a scheduler spreading singletons holds back while a live instance leads
// fewer terms). A later lease registers again.
func (s *Session) Deregister(ctx context.Context) error {
	s.mu.Lock()
	l := s.cur
	s.mu.Unlock()
	if l == nil {
		return nil
	}
	key := InstanceKey(s.cfg.Prefix, s.cfg.Instance)
	_, err := s.cfg.Client.Txn(ctx).
		If(clientv3.Compare(clientv3.LeaseValue(key), "=", l.id)).
		Then(clientv3.OpDelete(key)).
		Commit()
	if err != nil {
		return fmt.Errorf("leadership: deregister %q: %w", s.cfg.Instance, err)
	}
	return nil
}
