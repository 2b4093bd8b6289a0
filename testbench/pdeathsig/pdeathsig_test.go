package pdeathsig

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// With SNIP_PDEATHSIG_HELPER set, the test binary is a parent that starts
// `sleep` through Start, prints its pid and exits without stopping it.
func TestMain(m *testing.M) {
	if os.Getenv("SNIP_PDEATHSIG_HELPER") == "1" {
		cmd := exec.Command("sleep", "600")
		if err := Start(cmd, syscall.SIGKILL); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println(cmd.Process.Pid)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// gone reports whether pid has exited (a zombie waiting for its new parent
// to reap it counts as gone).
func gone(pid int) bool {
	if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(fields) > 0 && (fields[0] == "Z" || fields[0] == "X")
}

func TestAChildDiesWithItsParent(t *testing.T) {
	parent := exec.Command(os.Args[0], "-test.run=^$")
	parent.Env = append(os.Environ(), "SNIP_PDEATHSIG_HELPER=1")
	out, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("the parent said nothing: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("the parent said %q", line)
	}
	if err := parent.Wait(); err != nil {
		t.Fatalf("the parent: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second) // a broken setup, not a slow one
	for !gone(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("sleep (pid %d) outlived its parent", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
