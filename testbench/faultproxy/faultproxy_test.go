package faultproxy_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/snip/snip-jobs/testbench/faultproxy"
)

// echo serves a line echo on a loopback port until the test ends.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func dial(t *testing.T, p *faultproxy.Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, line string) {
	t.Helper()
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	got, err := r.ReadString('\n')
	if err != nil || got != line+"\n" {
		t.Fatalf("echo of %q: %q, %v", line, got, err)
	}
}

// A cut holds every byte of an open connection, loses none, and delivers
// them in order once it heals, on the same connection.
func TestAPartitionHoldsBytesAndDeliversThemInOrderOnceHealed(t *testing.T) {
	p, err := faultproxy.New(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	c, r := dial(t, p)
	roundTrip(t, c, r, "before")

	p.Partition(true)
	for _, l := range []string{"one\n", "two\n", "three\n"} {
		if _, err := io.WriteString(c, l); err != nil {
			t.Fatal(err)
		}
	}
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if b, err := r.ReadByte(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read %q (%v) through a cut link", b, err)
	}
	p.Partition(false)
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	for _, want := range []string{"one\n", "two\n", "three\n"} {
		if got, err := r.ReadString('\n'); err != nil || got != want {
			t.Fatalf("after healing: %q, %v; want %q", got, err, want)
		}
	}
	roundTrip(t, c, r, "after")
}

// Latency delays every chunk; it applies to an open connection and can be
// removed.
func TestDelayHoldsEachChunkAtLeastTheLatency(t *testing.T) {
	p, err := faultproxy.New(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	c, r := dial(t, p)
	roundTrip(t, c, r, "warm")

	const d = 200 * time.Millisecond
	p.SetDelay(d)
	if p.Delay() != d {
		t.Fatalf("Delay() = %v, want %v", p.Delay(), d)
	}
	begin := time.Now()
	roundTrip(t, c, r, "slow")
	if rt := time.Since(begin); rt < 2*d { // held d each way: a floor, never a ceiling
		t.Fatalf("round trip %v through a %v latency each way", rt, d)
	}
	p.SetDelay(-time.Second)
	if p.Delay() != 0 {
		t.Fatalf("Delay() = %v after a negative SetDelay, want 0", p.Delay())
	}
	roundTrip(t, c, r, "fast")
}

// A chunk keeps the latency it was read with: raising the latency holds what
// is sent from then on, not what is already on its way (as on a real link).
func TestARaisedLatencyDoesNotHoldWhatIsAlreadyOnItsWay(t *testing.T) {
	got := make(chan string, 1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		line, _ := bufio.NewReader(c).ReadString('\n')
		got <- line
	}()
	p, err := faultproxy.New(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	read := make(chan struct{}, 1)
	p.OnRead(func() { read <- struct{}{} })
	c, _ := dial(t, p)

	p.SetDelay(100 * time.Millisecond)
	if _, err := io.WriteString(c, "on its way\n"); err != nil {
		t.Fatal(err)
	}
	<-read // the line is in flight, held 100 ms
	p.SetDelay(time.Hour)
	select {
	case line := <-got:
		if line != "on its way\n" {
			t.Fatalf("the server got %q", line)
		}
	case <-time.After(30 * time.Second): // the hour applied to it
		t.Fatal("a line read at 100 ms of latency was still held 30 s after the latency was raised to an hour")
	}
}

// Close drops what is held: it does not wait out a chunk's latency.
func TestCloseDoesNotWaitOutAHeldChunk(t *testing.T) {
	p, err := faultproxy.New(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	read := make(chan struct{}, 1)
	p.OnRead(func() { read <- struct{}{} })
	c, _ := dial(t, p)
	p.SetDelay(time.Hour)
	if _, err := io.WriteString(c, "held\n"); err != nil {
		t.Fatal(err)
	}
	<-read // held for the hour
	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second): // the hour's wait
		t.Fatal("Close still waiting 30 s after it was called, on a chunk held for an hour")
	}
}

// A connection the proxy cannot forward is closed, so the client's call
// fails rather than hangs.
func TestAConnectionToADownServerIsClosed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := ln.Addr().String()
	ln.Close()
	p, err := faultproxy.New(down)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	c, r := dial(t, p)
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := r.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("read through a proxy to a down server: %v, want EOF", err)
	}
}

// Close ends the open connections and a second Close is harmless.
func TestCloseEndsOpenConnections(t *testing.T) {
	p, err := faultproxy.New(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	c, r := dial(t, p)
	roundTrip(t, c, r, "open")
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := r.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("read after Close: %v, want EOF", err)
	}
}
