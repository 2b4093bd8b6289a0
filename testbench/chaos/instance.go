package chaos

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/snip/snip-jobs/app/sockact"
	"github.com/snip/snip-jobs/testbench/childproc"
	"github.com/snip/snip-jobs/testbench/faultproxy"
)

// instance is one `snip-jobs run` process with its own config, admin port,
// challenge port, fault proxies to its store (each etcd member, or the
// kube-apiserver) and a delay proxy to PostgreSQL. Its name, ports and proxies survive restarts.
type instance struct {
	name        string
	binary      string
	config      string
	logPath     string
	adminURL    string
	challenge   string              // host:port of its HTTP-01 listener
	store       []*faultproxy.Proxy // to each etcd member, or to the API server
	db          *faultproxy.Proxy
	databaseURL string
	// adminLn and challengeLn are the instance's ports, held by the harness
	// and passed to each of its processes (socket activation).
	adminLn, challengeLn *net.TCPListener
	// changed is called after the process started and after it exited.
	changed func()

	mu    sync.Mutex
	proc  *childproc.Proc
	done  chan struct{} // closed once proc's exit is in exits
	exits []int         // exit status of each run (-1: killed by a signal)
}

// start starts the process (it must not be running), passing it the
// instance's admin and challenge sockets.
func (in *instance) start() error {
	if err := in.startLocked(); err != nil {
		return err
	}
	in.changed()
	return nil
}

func (in *instance) startLocked() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.proc != nil {
		return fmt.Errorf("%s is running", in.name)
	}
	proc, err := childproc.Start(childproc.Spec{
		Path: in.binary, Args: []string{"run", "--config", in.config},
		Env: []string{"SNIP_JOBS_DATABASE_URL=" + in.databaseURL}, Log: in.logPath,
		Sockets: []sockact.Socket{{Name: "admin", Listener: in.adminLn}, {Name: "challenge", Listener: in.challengeLn}},
	})
	if err != nil {
		return fmt.Errorf("start %s: %w", in.name, err)
	}
	done := make(chan struct{})
	in.proc, in.done = proc, done
	go func() {
		<-proc.Done()
		in.mu.Lock()
		in.exits = append(in.exits, proc.ExitCode())
		if in.proc == proc {
			in.proc = nil
		}
		in.mu.Unlock()
		in.changed()
		close(done)
	}()
	return nil
}

// reclaim runs `snip-jobs reclaim` for the instance, as systemd's
// ExecStopPost= does once the process has exited, with env (systemd's
// SERVICE_RESULT, EXIT_CODE, EXIT_STATUS); its output goes to the instance's
// log.
func (in *instance) reclaim(ctx context.Context, env ...string) error {
	logf, err := os.OpenFile(in.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, in.binary, "reclaim", "--config", in.config)
	cmd.Env = childproc.Env(env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("snip-jobs reclaim for %s: %w", in.name, err)
	}
	return nil
}

func (in *instance) running() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.proc != nil
}

// signal sends sig to the running process.
func (in *instance) signal(sig syscall.Signal) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.proc == nil {
		return fmt.Errorf("%s is not running", in.name)
	}
	return in.proc.Signal(sig)
}

// wait waits up to bound for the process to exit; it SIGKILLs it after that.
func (in *instance) wait(bound time.Duration) (exited bool) {
	in.mu.Lock()
	p, done := in.proc, in.done
	in.mu.Unlock()
	if p == nil {
		return true
	}
	exited = p.Wait(bound)
	<-done
	return exited
}

// kill SIGKILLs the process (a paused one too) and waits until its exit is
// recorded.
func (in *instance) kill() {
	in.mu.Lock()
	p, done := in.proc, in.done
	in.mu.Unlock()
	if p == nil {
		return
	}
	p.Kill()
	<-done
}

// ready reports whether /readyz answers 200.
func (in *instance) ready(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, in.adminURL+"/readyz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// partition cuts (or restores) the instance's traffic to its store (every
// etcd member, or the API server).
func (in *instance) partition(on bool) {
	for _, p := range in.store {
		p.Partition(on)
	}
}

// closeLinks closes the instance's proxies and its ports (once it has exited).
func (in *instance) closeLinks() {
	for _, p := range in.store {
		_ = p.Close()
	}
	if in.db != nil {
		_ = in.db.Close()
	}
	for _, ln := range []*net.TCPListener{in.adminLn, in.challengeLn} {
		if ln != nil {
			ln.Close()
		}
	}
}

func (in *instance) logs() string {
	b, _ := os.ReadFile(in.logPath)
	return string(b)
}

// logTail is the last n lines of the instance's log (every run of it).
func (in *instance) logTail(n int) string {
	lines := strings.Split(strings.TrimRight(in.logs(), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// writeInstanceConfig writes the instance's config file.
// store is its store's section (etcd's, or kubernetes').
func writeInstanceConfig(dir string, in *instance, store string, o Options, jobs string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "instance: %s\n", in.name)
	b.WriteString(store)
	b.WriteString("postgres:\n  url_env: SNIP_JOBS_DATABASE_URL\n")
	b.WriteString("leadership:\n")
	if o.Backend == BackendKubernetes {
		fmt.Fprintf(&b, "  backend: %s\n", o.Backend)
	}
	if o.DefaultTiming {
		fmt.Fprintf(&b, "  ttl: %s\n", o.TTL)
	} else {
		fmt.Fprintf(&b, "  ttl: %s\n  margin: %s\n  renew_interval: %s\n", o.TTL, o.margin(), o.renewInterval())
	}
	fmt.Fprintf(&b, "http:\n  listen: %s\n", strings.TrimPrefix(in.adminURL, "http://"))
	b.WriteString("log:\n  format: json\n  level: info\n")
	b.WriteString("shutdown_timeout: 10s\n")
	b.WriteString("jobs:\n")
	b.WriteString(strings.NewReplacer("{{challenge}}", in.challenge, "{{database}}", in.databaseURL).Replace(jobs))
	in.config = filepath.Join(dir, in.name+".yaml")
	return os.WriteFile(in.config, []byte(b.String()), 0o600)
}

func lastExit(in *instance) int {
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.exits) == 0 {
		return -2
	}
	return in.exits[len(in.exits)-1]
}

func joinErrs(a, b error) error {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	return fmt.Errorf("%w; %w", a, b)
}
