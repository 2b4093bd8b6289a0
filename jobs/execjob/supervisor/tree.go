package supervisor

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// proc is one process as /proc/<pid>/stat showed it.
type proc struct {
	pid, ppid, sid int
	start          uint64 // clock ticks after boot; with pid, the process's identity
	state          byte   // R, S, D, Z, X, T…
}

// ident names one process across pid reuse.
type ident struct {
	pid   int
	start uint64
}

func (p proc) ident() ident { return ident{p.pid, p.start} }

// dead is a process that has exited: a zombie waits to be reaped, it runs
// nothing and forks nothing.
func (p proc) dead() bool { return p.state == 'Z' || p.state == 'X' }

// readStat reads /proc/<pid>/stat.
func readStat(pid int) (proc, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return proc{}, err
	}
	// "pid (comm) state ppid pgrp session … starttime(22nd) …"; comm may
	// hold anything, spaces and parentheses included, so cut at the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 > len(b) {
		return proc{}, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	f := bytes.Fields(b[i+2:]) // f[0] is field 3
	if len(f) < 20 || len(f[0]) != 1 {
		return proc{}, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	ppid, err1 := strconv.Atoi(string(f[1]))
	sid, err2 := strconv.Atoi(string(f[3]))
	start, err3 := strconv.ParseUint(string(f[19]), 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return proc{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return proc{pid: pid, ppid: ppid, sid: sid, start: start, state: f[0][0]}, nil
}

// descendants lists every process whose chain of parents leads to root,
// dead ones included. A process that left its parent (setsid, a double
// fork) is still found: as an orphan it re-parented to the nearest
// subreaper, which for a supervisor's tree is the supervisor.
func descendants(root int) ([]proc, error) {
	d, err := os.Open("/proc")
	if err != nil {
		return nil, err
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return nil, fmt.Errorf("reading /proc: %w", err)
	}
	children := map[int][]proc{}
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue // not a process
		}
		p, err := readStat(pid)
		if err != nil {
			continue // gone since the listing
		}
		children[p.ppid] = append(children[p.ppid], p)
	}
	var out []proc
	for next := []int{root}; len(next) > 0; {
		pid := next[len(next)-1]
		next = next[:len(next)-1]
		for _, c := range children[pid] {
			out = append(out, c)
			next = append(next, c.pid)
		}
	}
	return out, nil
}

// signalTree sends sig to every live descendant of root, and SIGCONT after
// it when cont is set (a stopped process acts on SIGTERM only once
// continued). It adds each process signalled to seen and returns how many
// it signalled.
func signalTree(root int, sig unix.Signal, cont bool, seen map[ident]bool) int {
	procs, err := descendants(root)
	if err != nil {
		// Without /proc nothing can be found; the caller's loop tries
		// again, and the direct children die of their Pdeathsig at worst.
		return 0
	}
	n := 0
	for _, p := range procs {
		if p.dead() || !send(p, sig) {
			continue
		}
		if cont {
			send(p, unix.SIGCONT)
		}
		seen[p.ident()] = true
		n++
	}
	return n
}

// send signals p if it is still the process the scan saw. A pidfd holds the
// process while its start time is checked, so a pid reused since the scan
// (pid_max may be as low as 32768) is never signalled.
func send(p proc, sig unix.Signal) bool {
	fd, err := unix.PidfdOpen(p.pid, 0)
	if errors.Is(err, unix.ENOSYS) { // Linux before 5.3
		if now, err := readStat(p.pid); err != nil || now.start != p.start {
			return false
		}
		return unix.Kill(p.pid, sig) == nil
	}
	if err != nil {
		return false // gone
	}
	defer unix.Close(fd)
	if now, err := readStat(p.pid); err != nil || now.start != p.start {
		return false
	}
	return unix.PidfdSendSignal(fd, sig, nil, 0) == nil
}
