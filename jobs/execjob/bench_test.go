package execjob_test

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/jobs/execjob"
	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/leadership/etcdlease/layout"
	"github.com/snip/snip-jobs/scheduler"
	"github.com/snip/snip-jobs/testbench/jobtest"
	"github.com/snip/snip-jobs/testbench/percentile"
)

// plainType is the baseline: the same program for the same term without the
// safety — started with os/exec, sent SIGTERM (its own process only) when the
// term ends, and waited for (its own exit only).
func plainType(command []string) scheduler.Type {
	return scheduler.Type{Name: "plain", New: func(scheduler.Env, configs.Job) (scheduler.Job, error) {
		return scheduler.JobFunc(func(ctx context.Context, r *scheduler.Run) error {
			cmd := exec.Command(command[0], command[1:]...)
			if err := cmd.Start(); err != nil {
				return err
			}
			stop := context.AfterFunc(ctx, func() { _ = cmd.Process.Signal(syscall.SIGTERM) })
			defer stop()
			_ = cmd.Wait()
			return nil
		}), nil
	}}
}

// BenchmarkATermsProgramStartsAndStops measures, on a real etcd and
// PostgreSQL, two instances handing a continuous job over by resign — the
// exec job and the baseline (plainType: the same program without the
// safety), alternating in one run: from the new term's leader key appearing
// in etcd to its program running (it opens a FIFO this benchmark reads: the
// shell's start included), and from the resign request to the old term's key
// deleted (the exec job resigns once its program's whole tree is proven
// gone; the baseline once its one process exited). The program obeys
// SIGTERM. One hand-over of each comes first, uncounted: each instance's
// first term of a job (its spare supervisor may still be starting). Run with
// -benchtime=Nx: N hand-overs of each.
func BenchmarkATermsProgramStartsAndStops(b *testing.B) {
	c := jobtest.NewCluster(b)
	dir := b.TempDir()
	prog := filepath.Join(dir, "program.sh")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\nexec 3>\"$1\"\nexec sleep 1000\n"), 0o755); err != nil {
		b.Fatal(err)
	}
	fifos := map[string]string{}
	for _, job := range []string{"exec", "plain"} {
		fifos[job] = filepath.Join(dir, job+".running")
		if err := syscall.Mkfifo(fifos[job], 0o600); err != nil {
			b.Fatal(err)
		}
	}
	jobs := []configs.Job{
		execJob(b, "exec", configs.Schedule{Kind: configs.Continuous}, execjob.Options{Command: []string{prog, fifos["exec"]}, Dir: "/", KillGrace: time.Second}),
		{Name: "plain", Type: "plain", Singleton: true, Grace: 10 * time.Second, Schedule: configs.Schedule{Kind: configs.Continuous}},
	}
	reg := jobtest.Registry(b, execjob.Type(), plainType([]string{prog, fifos["plain"]}))
	marks := newMarks()
	nodes := []*jobtest.Node{c.Start("server-1", reg, jobs, jobtest.WithLog(marks)), c.Start("server-2", reg, jobs, jobtest.WithLog(marks))}
	keys := watchKeys(b, c.Obs, c.Prefix)
	ctx := context.Background()
	running := func(job string) { // the job's next program opens its FIFO for writing
		f, err := os.Open(fifos[job])
		if err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
	running("exec") // the first programs
	running("plain")
	took := map[string]*[2][]time.Duration{"exec": {}, "plain": {}}
	var termToExec []time.Duration
	handOver := func(job string) {
		asked := time.Now()
		if _, _, err := leadership.Resign(ctx, c.Leadership, job); err != nil {
			b.Fatal(err)
		}
		gone := keys.next(b, job, false)
		created := keys.next(b, job, true)
		running(job)
		t := took[job]
		t[0] = append(t[0], time.Since(created))
		t[1] = append(t[1], gone.Sub(asked))
		if job == "exec" {
			termToExec = append(termToExec, marks.termToExec())
		}
	}
	handOver("exec") // the other instance's first terms
	handOver("plain")
	took = map[string]*[2][]time.Duration{"exec": {}, "plain": {}}
	termToExec = nil
	b.ResetTimer()
	for range b.N {
		for _, job := range []string{"exec", "plain"} {
			handOver(job)
		}
	}
	b.StopTimer()
	for _, job := range []string{"exec", "plain"} {
		percentile.Report(b, job+"-term-to-program-", took[job][0])
		percentile.Report(b, job+"-resign-to-handed-over-", took[job][1])
	}
	percentile.Report(b, "exec-term-start-to-exec-", termToExec)
	_ = nodes
}

// keyEvents is when the leader keys under a prefix were created and deleted,
// as a watch saw them.
type keyEvents struct {
	ch chan keyEvent
}

type keyEvent struct {
	job     string
	created bool
	at      time.Time
}

func watchKeys(b *testing.B, cli *clientv3.Client, prefix string) *keyEvents {
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	k := &keyEvents{ch: make(chan keyEvent, 1000)}
	leaders := layout.LeaderKey(prefix, "")
	w := cli.Watch(ctx, leaders, clientv3.WithPrefix())
	go func() {
		for resp := range w {
			at := time.Now()
			for _, ev := range resp.Events {
				k.ch <- keyEvent{job: string(ev.Kv.Key[len(leaders):]), created: ev.IsCreate(), at: at}
			}
		}
	}()
	return k
}

// next waits for the next creation (or deletion) of job's key.
func (k *keyEvents) next(b *testing.B, job string, created bool) time.Time {
	for {
		select {
		case ev := <-k.ch:
			if ev.job == job && ev.created == created {
				return ev.at
			}
		case <-time.After(jobtest.Patience):
			b.Fatalf("no %s of %s's leader key", map[bool]string{true: "creation", false: "deletion"}[created], job)
		}
	}
}

// marks keeps, from the instances' logs, when the exec job's newest term
// started (the session's "term started", as its term is won) and when its
// program was exec'd (the job's "program started", once the supervisor
// reports the pid: after the exec succeeded). Both are this process's clock.
type marks struct {
	shared *markTimes
	attrs  []slog.Attr
}

type markTimes struct {
	mu         sync.Mutex
	term, exec time.Time
}

func newMarks() *marks { return &marks{shared: &markTimes{}} }

func (m *marks) Enabled(context.Context, slog.Level) bool { return true }

func (m *marks) Handle(_ context.Context, r slog.Record) error {
	job := ""
	find := func(a slog.Attr) bool {
		if a.Key == "job" {
			job = a.Value.String()
		}
		return true
	}
	for _, a := range m.attrs {
		find(a)
	}
	r.Attrs(find)
	if job != "exec" {
		return nil
	}
	s := m.shared
	s.mu.Lock()
	defer s.mu.Unlock()
	switch r.Message {
	case "term started":
		s.term, s.exec = r.Time, time.Time{}
	case "program started":
		s.exec = r.Time
	}
	return nil
}

func (m *marks) WithAttrs(as []slog.Attr) slog.Handler {
	return &marks{shared: m.shared, attrs: append(slices.Clone(m.attrs), as...)}
}

func (m *marks) WithGroup(string) slog.Handler { return m }

// termToExec is the newest term's start → its program exec'd, once both are
// logged (the program has opened its FIFO: its start is being logged).
func (m *marks) termToExec() time.Duration {
	for {
		m.shared.mu.Lock()
		term, exec := m.shared.term, m.shared.exec
		m.shared.mu.Unlock()
		if !exec.IsZero() && exec.After(term) {
			return exec.Sub(term)
		}
		time.Sleep(time.Millisecond) // the log line follows the pid's report by microseconds
	}
}
