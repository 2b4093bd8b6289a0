package statuspage

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/scheduler/controls"
	"github.com/snip/snip-jobs/testbench/dbtest"
)

// The page shows the operators' controls in force, read from PostgreSQL: a
// paused job (its leader cell says paused), a drained instance, an open
// manual run, each with who, how long ago and why; and the same in
// /status/cluster.json.
func TestThePageShowsPausedJobsDrainedInstancesAndManualRunsWithWhoAndWhy(t *testing.T) {
	ctx := context.Background()
	_, pool := dbtest.New(t)
	jobs := []configs.Job{
		{Name: "pulse", Type: "sql", Singleton: true, Schedule: configs.Schedule{Kind: configs.Interval, Every: time.Second}},
		{Name: "prune", Type: "sql", Schedule: configs.Schedule{Kind: configs.Interval, Every: time.Minute}},
	}
	if _, _, err := controls.PauseJob(ctx, pool, "pulse", "alice@web1", "backfill <running>"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := controls.DrainInstance(ctx, pool, "server-b", "bob@web2", "kernel upgrade"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := controls.RequestRun(ctx, pool, jobs[1], "carol@web3"); err != nil {
		t.Fatal(err)
	}
	page, err := New(Config{Instance: "server-a", Pool: pool, Jobs: jobs}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(page)
	t.Cleanup(srv.Close)

	html := get(t, srv.URL+"/status/", http.StatusOK)
	for _, want := range []string{
		`<span class="pill paused" title="paused by alice@web1: backfill &lt;running&gt;">paused</span>`,
		`<li class="control paused" data-job="pulse"><span class="pill paused">paused</span> <strong>pulse</strong> by alice@web1, `,
		` ago: “backfill &lt;running&gt;” <span class="muted">— no instance runs it until <code>snip-jobs resume pulse</code>`,
		`<li class="control drained" data-instance="server-b"><span class="pill drained">drained</span> <strong>server-b</strong> by bob@web2, `,
		` ago: “kernel upgrade”`,
		`<li class="control manual" data-job="prune"><span class="pill manual">manual run</span> <strong>prune</strong> #1: pending, asked for by carol@web3 `,
	} {
		if !strings.Contains(html, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	var s Snapshot
	if err := json.Unmarshal([]byte(get(t, srv.URL+"/status/cluster.json", http.StatusOK)), &s); err != nil {
		t.Fatal(err)
	}
	if p := s.Jobs[0].Paused; p == nil || p.By != "alice@web1" || p.Reason != "backfill <running>" || time.Since(p.Since) > time.Hour {
		t.Errorf("cluster.json: pulse's pause %+v", p)
	}
	if len(s.Drained) != 1 || s.Drained[0].Instance != "server-b" || s.Drained[0].Reason != "kernel upgrade" {
		t.Errorf("cluster.json: drained %+v", s.Drained)
	}
	if m := s.Jobs[1].ManualRun; m == nil || m.RequestedBy != "carol@web3" || m.State != "pending" {
		t.Errorf("cluster.json: prune's manual run %+v", m)
	}
}
