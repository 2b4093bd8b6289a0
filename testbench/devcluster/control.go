package devcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/snip/snip-jobs/app/statuspage"
	"github.com/snip/snip-jobs/leadership"
)

// resignBound bounds a /dev/resign: the hand-over itself takes milliseconds,
// unless the leader's job is slow to stop (its grace period).
const resignBound = 30 * time.Second

func (c *Cluster) startControl(ln net.Listener) {
	c.controlURL = "http://" + ln.Addr().String()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", c.home)
	mux.HandleFunc("GET /dev/state", c.state)
	mux.HandleFunc("POST /dev/{action}", c.act)
	mux.HandleFunc("OPTIONS /dev/{action}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Access-Control-Allow-Methods", "POST")
		w.Header().Set("Access-Control-Allow-Headers", "Accept, Content-Type")
		w.WriteHeader(http.StatusNoContent)
	})
	c.control = &http.Server{Handler: c.checkOrigin(mux), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(c.served)
		_ = c.control.Serve(ln)
	}()
}

// checkOrigin refuses requests from pages other than the cluster's own (a web
// page elsewhere must not drive the supervisor), and lets the cluster's pages
// read the answers (CORS). A request without Origin (curl) is accepted.
func (c *Cluster) checkOrigin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if origin := r.Header.Get("Origin"); origin != "" {
			if !c.ours(origin) {
				http.Error(w, "snip-dev: requests are accepted only from the cluster's own status pages", http.StatusForbidden)
				return
			}
			w.Header().Set("Access-Control-Allow-Origin", origin)
			w.Header().Add("Vary", "Origin")
		}
		next.ServeHTTP(w, r)
	})
}

// ours reports whether u (an origin or a URL) is one of the cluster's pages:
// http on a loopback host and the port of the supervisor or of an instance.
func (c *Cluster) ours(u string) bool {
	p, err := url.Parse(u)
	if err != nil || p.Scheme != "http" {
		return false
	}
	switch p.Hostname() {
	case "127.0.0.1", "localhost", "::1":
	default:
		return false
	}
	port, err := strconv.Atoi(p.Port())
	if err != nil {
		return false
	}
	if _, cport, err := net.SplitHostPort(strings.TrimPrefix(c.controlURL, "http://")); err == nil && strconv.Itoa(port) == cport {
		return true
	}
	for _, ch := range c.children {
		if ch.port == port {
			return true
		}
	}
	return false
}

// home sends a browser to the page of the first instance that runs.
func (c *Cluster) home(w http.ResponseWriter, r *http.Request) {
	for _, ch := range c.children {
		if ch.info().State == stateRunning {
			http.Redirect(w, r, ch.page, http.StatusFound)
			return
		}
	}
	http.Error(w, "no instance runs: POST /dev/restart?instance=NAME", http.StatusServiceUnavailable)
}

// State is the body of GET /dev/state.
func (c *Cluster) State() statuspage.DevState {
	st := statuspage.DevState{Control: c.controlURL, Instances: []statuspage.DevInstance{}, Ends: c.ends.list()}
	for _, ch := range c.children {
		i := ch.info()
		st.Instances = append(st.Instances, statuspage.DevInstance{Name: ch.name, PID: i.PID, State: i.State, Exit: i.Exit, Page: ch.page})
	}
	return st
}

func (c *Cluster) state(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(c.State())
}

// requestError is a request's own mistake (400) rather than a failure.
type requestError struct{ msg string }

func (e *requestError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &requestError{msg: fmt.Sprintf(format, args...)}
}

func (c *Cluster) act(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		c.reply(w, r, "", badRequest("%v", err))
		return
	}
	msg, err := c.Do(r.Context(), r.PathValue("action"), r.Form.Get("instance"), r.Form.Get("job"))
	c.reply(w, r, msg, err)
}

// Do carries out a dev action: kill, pause, resume, restart (of instance, or
// of job's current leader) or resign (job). It returns what it did, for
// people, and says it on the cluster's Out too.
func (c *Cluster) Do(ctx context.Context, action, instance, job string) (string, error) {
	if action == "resign" {
		if job == "" {
			return "", badRequest("resign needs job=NAME")
		}
		return c.resign(ctx, job)
	}
	if action == "resume" && instance == "" && job == "" {
		return c.resumeAll()
	}
	switch action {
	case "kill", "pause", "resume", "restart":
	default:
		return "", badRequest("unknown action %q: kill, pause, resume, restart or resign", action)
	}
	ch, who, err := c.target(ctx, instance, job)
	if err != nil {
		return "", err
	}
	ch.op.Lock()
	defer ch.op.Unlock()
	var msg string
	switch action {
	case "kill":
		pid, err := ch.signal(syscall.SIGKILL)
		if err != nil {
			return "", err
		}
		msg = fmt.Sprintf("killed %s (pid %d, SIGKILL)%s: no resign, no release by the process; once it has exited, dev ends the lease "+
			"it left (%s, as systemd's ExecStopPost= does) and its jobs move at once, where a dead host's would wait out the lease (%v)",
			ch.name, pid, role(who), c.terms.endsLease(), c.cfg.TTL)
	case "pause":
		pid, err := ch.signal(syscall.SIGSTOP)
		if err != nil {
			return "", err
		}
		msg = fmt.Sprintf("paused %s (pid %d, SIGSTOP)%s: its lease expires within %v and another instance takes its jobs; resume it to watch it find its terms over", ch.name, pid, role(who), c.cfg.TTL)
	case "resume":
		if ch.info().State != statePaused {
			return "", badRequest("%s is not paused", ch.name)
		}
		pid, err := ch.signal(syscall.SIGCONT)
		if err != nil {
			return "", err
		}
		msg = fmt.Sprintf("resumed %s (pid %d, SIGCONT)", ch.name, pid)
	case "restart":
		if msg, err = ch.restart(ctx); err != nil {
			return "", err
		}
		// Answer once it is ready: a browser sent back to its page then
		// finds the page, not "starting".
		rctx, cancel := context.WithTimeout(ctx, readyBound)
		err = ch.waitReady(rctx)
		cancel()
		if err != nil {
			return "", err
		}
		msg += "; ready"
	}
	c.say("dev: %s", msg)
	return msg, nil
}

// target finds the instance named, or the current leader of job.
func (c *Cluster) target(ctx context.Context, instance, job string) (*child, string, error) {
	switch {
	case instance != "" && job != "":
		return nil, "", badRequest("give instance or job, not both")
	case instance != "":
		for _, ch := range c.children {
			if ch.name == instance {
				return ch, "", nil
			}
		}
		return nil, "", badRequest("no instance %q", instance)
	case job == "":
		return nil, "", badRequest("give instance=NAME or job=NAME")
	}
	ld, ok, err := c.terms.cluster().Leader(ctx, job)
	l := refOf(ld)
	switch {
	case err != nil:
		return nil, "", err
	case !ok:
		return nil, "", badRequest("%s has no leader now (just killed? a job that runs everywhere?)", job)
	}
	for _, ch := range c.children {
		if ch.name == l.instance {
			return ch, fmt.Sprintf("the leader of %s (token %d)", job, l.token), nil
		}
	}
	return nil, "", fmt.Errorf("the leader of %s is %q, not one of this cluster's instances", job, l.instance)
}

func role(who string) string {
	if who == "" {
		return ""
	}
	return ", " + who
}

func (c *Cluster) resumeAll() (string, error) {
	var resumed []string
	for _, ch := range c.children {
		ch.op.Lock()
		if ch.info().State == statePaused {
			if _, err := ch.signal(syscall.SIGCONT); err == nil {
				resumed = append(resumed, ch.name)
			}
		}
		ch.op.Unlock()
	}
	if len(resumed) == 0 {
		return "no instance is paused", nil
	}
	msg := "resumed " + strings.Join(resumed, ", ") + " (SIGCONT)"
	c.say("dev: %s", msg)
	return msg, nil
}

func (c *Cluster) resign(ctx context.Context, job string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, resignBound)
	defer cancel()
	before, after, err := leadership.Resign(ctx, c.terms.cluster(), job)
	if errors.Is(err, leadership.ErrNoLeader) {
		return "", badRequest("%s has no leader now", job)
	}
	if err != nil {
		return "", err
	}
	var msg string
	switch {
	case after == nil:
		msg = fmt.Sprintf("%s: %s (token %d) resigned; nobody has taken it yet", job, before.Instance, before.Token)
	default:
		msg = fmt.Sprintf("%s: %s (token %d) resigned; %s took over (token %d)", job, before.Instance, before.Token, after.Instance, after.Token)
	}
	c.say("dev: %s", msg)
	return msg, nil
}

// reply answers a form post from a page without JavaScript by sending the
// browser back to the page (303), and anything else with JSON.
func (c *Cluster) reply(w http.ResponseWriter, r *http.Request, msg string, err error) {
	code := http.StatusOK
	switch {
	case errors.As(err, new(*requestError)):
		code = http.StatusBadRequest
	case err != nil:
		code = http.StatusInternalServerError
	}
	accept := r.Header.Get("Accept")
	if strings.Contains(accept, "text/html") && !strings.Contains(accept, "application/json") {
		back := r.Form.Get("back")
		if err == nil && back != "" && c.ours(back) {
			http.Redirect(w, r, back, http.StatusSeeOther)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(code)
		text := msg
		if err != nil {
			text = err.Error()
		}
		fmt.Fprintf(w, "<!doctype html><title>snip-dev</title><p>%s</p>", html.EscapeString(text))
		if back != "" && c.ours(back) {
			fmt.Fprintf(w, `<p><a href="%s">back</a></p>`, html.EscapeString(back))
		}
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	body := map[string]string{"message": msg}
	if err != nil {
		body = map[string]string{"error": err.Error()}
	}
	_ = json.NewEncoder(w).Encode(body)
}
