// Package pdeathsig starts child processes that the kernel signals when this
// process dies, however it dies (a panic, SIGKILL, the test -timeout alarm), so
// that a server started for a test or for snip-dev is not left running.
//
// Linux delivers the parent-death signal (prctl PR_SET_PDEATHSIG) when the
// thread that forked the child exits, not when the process does, and the Go
// runtime may retire an ordinary thread at any time. Start therefore forks
// every child from one goroutine locked to its OS thread for the life of the
// process: that thread never exits before the process does.
//
// Limits: Linux only. Only the direct child is signalled; its own children
// need their own arrangement (PostgreSQL's postmaster stops its backends when
// it gets SIGQUIT). A child that changes credentials by running a set-user-ID
// binary loses the setting (os/exec's Credential is applied before it, and
// keeps it).
package pdeathsig

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// Start starts cmd with sig as its parent-death signal, from the pinned
// thread. It returns cmd.Start's error.
func Start(cmd *exec.Cmd, sig syscall.Signal) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = sig
	pinned.once.Do(func() {
		pinned.reqs = make(chan *exec.Cmd)
		pinned.errs = make(chan error)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the process
			for cmd := range pinned.reqs {
				pinned.errs <- cmd.Start()
			}
		}()
	})
	pinned.mu.Lock()
	defer pinned.mu.Unlock()
	pinned.reqs <- cmd
	return <-pinned.errs
}

var pinned struct {
	once sync.Once
	mu   sync.Mutex // one request at a time
	reqs chan *exec.Cmd
	errs chan error
}
