package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/snip/snip-jobs/testbench/clitest"
)

// clusterView is what this test reads of a page's /status/cluster.json.
type clusterView struct {
	Backend string `json:"backend"`
	Jobs    []struct {
		Name   string      `json:"job"`
		Mode   string      `json:"mode"`
		Leader *pageLeader `json:"leader"`
	} `json:"jobs"`
	Instances []struct {
		Name  string `json:"instance"`
		Up    bool   `json:"up"`
		Leads int    `json:"leads"`
	} `json:"instances"`
	Errors []string `json:"errors"`
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s, %v", url, resp.Status, err)
	}
}

// snip-dev --backend kubernetes runs the instances on a local
// kube-apiserver's Leases, with no etcd in their configs: every status page
// and `snip-jobs status` name the leader of each singleton from the Leases,
// the supervisor's resign moves a job to another instance with a higher
// token, as narrated; Ctrl-C stops everything and removes every file.
func TestDevOnKubernetesLeasesShowsTheLeadersAndResigns(t *testing.T) {
	t.Parallel()
	dev := startDev(t, "--backend", "kubernetes")
	out := dev.stdout()
	cfgPath := regexp.MustCompile(`status --watch --config (\S+)`).FindStringSubmatch(out)
	if !strings.Contains(out, "What happens, as kubernetes reports it:") || cfgPath == nil {
		t.Fatalf("dev's banner:\n%s", out)
	}
	// Nothing in the banner speaks of etcd, nor of revoking leases.
	if banner, _, _ := strings.Cut(out, "What happens"); strings.Contains(banner, "etcd") || strings.Contains(banner, "revok") {
		t.Errorf("dev's banner on Kubernetes speaks of etcd or revoking:\n%s", banner)
	}
	if b, err := os.ReadFile(cfgPath[1]); err != nil || !strings.Contains(string(b), "  backend: kubernetes\n") || strings.Contains(string(b), "etcd:") {
		t.Fatalf("%s: %v\n%s", cfgPath[1], err, b)
	}
	st := dev.state()
	job, lead := waitLeaders(t, st)
	if r := snip(t, "status", "--config", cfgPath[1]); r.Code != 0 || len(clitest.LinesWith(r.Stdout, job, lead.Instance, fmt.Sprint(lead.Token), "renewed")) != 1 {
		t.Errorf("status: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	next, token := devResign(t, dev, job, lead.Instance, lead.Token)
	eventually(t, "the narration of the hand-over", func() bool {
		out := dev.stdout()
		return strings.Contains(out, fmt.Sprintf("%s's term is over (token %d)", lead.Instance, lead.Token)) &&
			strings.Contains(out, fmt.Sprintf("→ %s leads (token %d)", next, token))
	})
	// A kill is narrated as Kubernetes ends the dead instance's lease.
	resp, err := http.Post(dev.control+"/dev/kill?job="+job, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	var msg struct{ Message, Error string }
	json.NewDecoder(resp.Body).Decode(&msg)
	resp.Body.Close()
	if !strings.Contains(msg.Message, "deletes its instance Lease") || strings.Contains(msg.Message, "revok") {
		t.Errorf("kill on Kubernetes: %+v; want the instance Lease deleted, nothing revoked", msg)
	}
	stopDev(t, dev, st)
}

type pageLeader struct {
	Instance string `json:"instance"`
	Token    int64  `json:"token"`
}

// waitLeaders waits until every page shows three instances up, a leader for
// each singleton, read from the Leases, and the terms spread (no instance
// leads two more than another, max − min ≤ 1, one leading none counted: the
// instances started one after another, and until then the others hand terms
// over), and returns the first singleton and its leader.
func waitLeaders(t *testing.T, st devState) (string, *pageLeader) {
	t.Helper()
	var v clusterView
	eventually(t, "three instances up and a leader for each singleton, on every page", func() bool {
		for _, in := range st.Instances {
			getJSON(t, in.Page+"cluster.json", &v)
			if v.Backend != "kubernetes" || len(v.Errors) > 0 || len(v.Instances) != 3 || !v.Instances[0].Up || !v.Instances[1].Up || !v.Instances[2].Up {
				return false
			}
			for _, j := range v.Jobs {
				if j.Mode == "leader" && j.Leader == nil {
					return false
				}
			}
			var leads []int
			for _, in := range v.Instances {
				leads = append(leads, in.Leads)
			}
			if slices.Max(leads)-slices.Min(leads) > 1 {
				return false
			}
		}
		return true
	})
	for _, j := range v.Jobs {
		if j.Mode == "leader" {
			return j.Name, j.Leader
		}
	}
	t.Fatalf("no singleton in the demo: %+v", v.Jobs)
	return "", nil
}

// devResign asks the supervisor to make job's leader resign, and returns
// the successor it names: another instance, with a higher token.
func devResign(t *testing.T, dev *devProcess, job, leader string, token int64) (string, int64) {
	t.Helper()
	resp, err := http.Post(dev.control+"/dev/resign?job="+job, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	var msg struct{ Message, Error string }
	json.NewDecoder(resp.Body).Decode(&msg)
	resp.Body.Close()
	m := regexp.MustCompile(`resigned; (\S+) took over \(token (\d+)\)`).FindStringSubmatch(msg.Message)
	if resp.StatusCode != http.StatusOK || m == nil || m[1] == leader || !strings.HasPrefix(msg.Message, fmt.Sprintf("%s: %s (token %d)", job, leader, token)) {
		t.Fatalf("resign: %s %+v; want %s (token %d) handing over to another instance", resp.Status, msg, leader, token)
	}
	next, err := strconv.ParseInt(m[2], 10, 64)
	if err != nil || next <= token {
		t.Errorf("the successor's token %s is not above %d", m[2], token)
	}
	return m[1], next
}

// stopDev sends SIGINT and checks that dev exits 0 having removed its
// folder and stopped every instance of st.
func stopDev(t *testing.T, dev *devProcess, st devState) {
	t.Helper()
	dir := regexp.MustCompile(`(/\S*/snip-jobs-dev-\d+)`).FindStringSubmatch(dev.stdout())
	if code := dev.interrupt(); code != 0 || !strings.Contains(dev.stdout(), "stopped; removed ") {
		t.Errorf("dev exited %d after SIGINT:\n%s", code, dev.stdout())
	}
	if _, err := os.Stat(dir[1]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s is still there after dev stopped (%v)", dir[1], err)
	}
	for _, in := range st.Instances {
		if err := syscall.Kill(in.PID, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("%s (pid %d) still runs after dev stopped", in.Name, in.PID)
		}
	}
}

// The demo's exec job: the narration says when its program runs (its pid)
// and, when its leader is killed, that the program is over — every process
// of it gone — and the successor's program runs, with a higher token.
func TestDevNarratesTheExecDemosProgramAcrossAKill(t *testing.T) {
	t.Parallel()
	dev := startDev(t)
	runs := regexp.MustCompile(`fenced-script\s+its program runs \(pid (\d+), token (\d+);`)
	var first []string
	eventually(t, "the exec demo's program running", func() bool {
		first = runs.FindStringSubmatch(dev.stdout())
		return first != nil
	})
	resp, err := http.Post(dev.control+"/dev/kill?job=fenced-script", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	over := fmt.Sprintf("token %s's program (pid %s) is over, every process of it gone: ", first[2], first[1])
	var next []string
	eventually(t, "the program over and the successor's running", func() bool {
		out := dev.stdout()
		all := runs.FindAllStringSubmatch(out, -1)
		if len(all) < 2 || !strings.Contains(out, over) {
			return false
		}
		next = all[len(all)-1]
		return true
	})
	if a, b := atoi64(t, first[2]), atoi64(t, next[2]); b <= a || next[1] == first[1] {
		t.Errorf("the successor's program: pid %s token %d, after pid %s token %d; want another process, a higher token", next[1], b, first[1], a)
	}
	if _, err := os.Stat("/proc/" + first[1]); err == nil {
		t.Errorf("the killed leader's program (pid %s) is alive", first[1])
	}
	stopDev(t, dev, dev.state())
}
