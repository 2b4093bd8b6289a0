package supervisor

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/snip/snip-jobs/testbench/percentile"
)

// The benchmarks report the p50 and p99 of what each iteration measured.
// The supervisor is this test binary, or the binary SNIP_SUPERVISOR_BINARY
// names (a built snip-jobs, whose start pays for every package it links).

const benchGrace = 100 * time.Millisecond

// benchStart starts script; with ready, it waits for the program's first
// line of output.
func benchStart(b *testing.B, script string, ready bool) *Process {
	s := Spec{Path: "/bin/sh", Args: []string{"-c", script}, Env: programEnv, Grace: time.Minute,
		Binary: os.Getenv("SNIP_SUPERVISOR_BINARY"), Label: b.Name()}
	var r *os.File
	if ready {
		var w *os.File
		var err error
		if r, w, err = os.Pipe(); err != nil {
			b.Fatal(err)
		}
		defer r.Close()
		s.Stdout = w
		defer w.Close()
	}
	p, err := Start(b.Context(), s)
	if err != nil {
		b.Fatal(err)
	}
	if ready {
		s.Stdout.Close()
		if _, err := bufio.NewReader(r).ReadString('\n'); err != nil {
			b.Fatalf("the program said nothing: %v", err)
		}
	}
	return p
}

// Start's time: a supervisor exec'd and ready, the program exec'd and its
// pid reported.
func BenchmarkStart(b *testing.B) {
	took := make([]time.Duration, 0, b.N)
	for i := range b.N {
		t0 := time.Now()
		p := benchStart(b, `exec sleep 1000`, false)
		took = append(took, time.Since(t0))
		b.StopTimer()
		if i == 0 {
			reportMemory(b, p)
		}
		p.Stop(0)
		<-p.Done()
		b.StartTimer()
	}
	percentile.Report(b, "", took)
}

// Start's time from a spare supervisor (Prepare, untimed, as an exec job
// keeps one ready): the program exec'd and its pid reported; the same with
// files hidden from the program (Spec.Hide: two files behind /etc and
// /var/lib/dpkg, a few hundred directory entries to grant around them);
// beside them, the baseline without the safety: os/exec starting the same
// program from this process, alternating in one run.
func BenchmarkStartFromASpare(b *testing.B) {
	spec := Spec{Path: "/bin/sh", Args: []string{"-c", "exec sleep 1000"}, Env: programEnv, Grace: time.Minute,
		Binary: os.Getenv("SNIP_SUPERVISOR_BINARY"), Label: b.Name()}
	hiding := spec
	hiding.Hide = []string{"/etc/hostname", "/var/lib/dpkg/status"}
	var spare, hidden, plain []time.Duration
	fromSpare := func(spec Spec, took *[]time.Duration) {
		b.StopTimer()
		sp, err := Prepare(spec)
		if err != nil {
			b.Fatal(err)
		}
		<-sp.Ready()
		b.StartTimer()
		t0 := time.Now()
		p, err := sp.Start(b.Context(), spec)
		if err != nil {
			b.Fatal(err)
		}
		*took = append(*took, time.Since(t0))
		b.StopTimer()
		p.Stop(0)
		<-p.Done()
		b.StartTimer()
	}
	for range b.N {
		fromSpare(spec, &spare)
		fromSpare(hiding, &hidden)
		b.StopTimer()
		b.StartTimer()
		t0 := time.Now()
		cmd := exec.Command(spec.Path, spec.Args...)
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		plain = append(plain, time.Since(t0))
		b.StopTimer()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		b.StartTimer()
	}
	percentile.Report(b, "spare-", spare)
	percentile.Report(b, "spare-hiding-", hidden)
	percentile.Report(b, "os-exec-", plain)
}

// Stop until Done: the tree's SIGTERM (or its grace and SIGKILL), the
// proof that it is gone, the supervisor's report and exit.
func BenchmarkStopUntilDone(b *testing.B) {
	b.Run("program obeys SIGTERM", func(b *testing.B) {
		benchStop(b, `echo ready; exec sleep 1000`, time.Minute)
	})
	b.Run("program ignores SIGTERM", func(b *testing.B) {
		// What is reported is beyond the grace: SIGKILL's lateness and the proof.
		benchStop(b, `trap '' TERM; echo ready; exec sleep 1000`, benchGrace)
	})
}

func benchStop(b *testing.B, script string, grace time.Duration) {
	took := make([]time.Duration, 0, b.N)
	for range b.N {
		b.StopTimer()
		p := benchStart(b, script, true)
		b.StartTimer()
		t0 := time.Now()
		p.Stop(grace)
		<-p.Done()
		d := time.Since(t0)
		if grace < time.Minute {
			d -= grace
		}
		took = append(took, d)
		if res := p.Result(); res.Err != nil || res.Ended != Stopped {
			b.Fatalf("result %+v", res)
		}
	}
	name := ""
	if grace < time.Minute {
		name = "over-grace-"
	}
	percentile.Report(b, name, took)
}

// reportMemory reports the supervisor's resident and private dirty memory:
// the second is its own (heap, stacks, written data); most of the first is
// the binary's pages, shared with snip-jobs run and every other supervisor.
func reportMemory(b *testing.B, p *Process) {
	st, err := readStat(p.PID())
	if err != nil {
		return
	}
	rollup, err := os.ReadFile("/proc/" + strconv.Itoa(st.ppid) + "/smaps_rollup")
	if err != nil {
		return
	}
	for line := range bytes.Lines(rollup) {
		f := bytes.Fields(line)
		if len(f) < 2 || (string(f[0]) != "Rss:" && string(f[0]) != "Private_Dirty:") {
			continue
		}
		if kb, err := strconv.Atoi(string(f[1])); err == nil {
			b.ReportMetric(float64(kb)/1024, "supervisor-"+strings.ToLower(strings.TrimSuffix(string(f[0]), ":"))+"-MB")
		}
	}
}
