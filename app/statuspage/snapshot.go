package statuspage

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/scheduler/controls"
	"github.com/snip/snip-jobs/scheduler/status"
)

// Snapshot is everything the page shows, read at one moment. It is also the
// body of /status/cluster.json.
type Snapshot struct {
	// Instance is the instance serving the page.
	Instance string `json:"instance"`
	Version  string `json:"version,omitempty"`
	// Now is the database's clock when the history was read; the timeline's
	// right edge. Without a database it is this host's clock.
	Now time.Time `json:"now"`
	// LocalNow is this host's clock at the same moment, for ages measured
	// from wall clocks written by instances (a leader's "since").
	LocalNow      time.Time    `json:"local_now"`
	WindowSeconds float64      `json:"window_seconds"`
	Jobs          []status.Job `json:"jobs"`
	// Instances are those the leadership backend lists (status.Read) and
	// those seen in the window's history or by the dev supervisor, by name.
	Instances []Instance `json:"instances"`
	// LeadersKnown is false when the leadership backend could not be read:
	// then no term can be told ongoing from lost.
	LeadersKnown bool `json:"leaders_known"`
	// Backend is the leadership backend read ("etcd", "kubernetes"; "" for none).
	Backend string `json:"backend,omitempty"`
	// Drained are the drained instances (snip-jobs drain), up or not; a
	// paused job says so in its Paused.
	Drained []controls.Drain `json:"drained"`
	// Terms overlap the window (or never recorded an end), oldest first.
	Terms []status.TermRecord `json:"terms"`
	// Rejections are the writes the fence refused in the window.
	Rejections []status.Rejection `json:"rejections"`
	// Dev is the dev supervisor's view (nil outside snip-dev, or when
	// it does not answer).
	Dev *DevState `json:"dev,omitempty"`
	// Errors are what could not be read; the rest is shown all the same.
	Errors []string `json:"errors,omitempty"`
}

// Window is the span of the timeline.
func (s Snapshot) Window() time.Duration {
	return time.Duration(s.WindowSeconds * float64(time.Second))
}

// Instance is one snip-jobs instance: up (registered in etcd), or seen in the
// window's history or by the dev supervisor.
type Instance struct {
	status.Instance
	// Terms is the number of terms it held in the window (job_terms).
	Terms int `json:"terms_in_window"`
	// Process is the dev supervisor's word on the process: running, paused,
	// exited or restarting; "" outside dev.
	Process string `json:"process,omitempty"`
}

// DevState is what the dev supervisor (snip-dev) says about its child
// processes: the body of its GET /dev/state.
type DevState struct {
	// Control is the supervisor's base URL; the page's buttons post there.
	Control   string        `json:"control"`
	Instances []DevInstance `json:"instances"`
	// Ends are why terms ended, in the supervisor's words (as it narrated
	// them): it knows what no instance could record, a process it killed
	// or paused. Newest last, bounded.
	Ends []DevEnd `json:"ends,omitempty"`
}

// DevEnd is the supervisor's word on the end of one term.
type DevEnd struct {
	Job    string `json:"job"`
	Token  int64  `json:"token"`
	Reason string `json:"reason"`
}

// DevInstance is one child process of the dev supervisor.
type DevInstance struct {
	Name  string `json:"instance"`
	PID   int    `json:"pid"`
	State string `json:"state"` // running, paused, exited, restarting
	Exit  string `json:"exit,omitempty"`
	Page  string `json:"page"` // the instance's status page
}

// Config says where a Page reads from.
type Config struct {
	// Instance and Version name the serving instance.
	Instance, Version string
	// Leadership reads the leaders and the instances from the leadership
	// backend (package clusterview); nil when the config needs none.
	Leadership status.LeadershipReader
	// Pool is the instance's database pool; nil without a database.
	Pool *pgxpool.Pool
	// Jobs is the instance's job list.
	Jobs []configs.Job
	// DevControl is the base URL of the dev supervisor (only set by
	// snip-dev, for its children); "" otherwise.
	DevControl string
	// ReadTimeout bounds one read of the cluster (default 3 s).
	ReadTimeout time.Duration
}

// Bounds of reads and of the window.
const (
	DefaultWindow      = 5 * time.Minute
	MinWindow          = 30 * time.Second
	MaxWindow          = time.Hour
	defaultReadTimeout = 3 * time.Second
	devStateTimeout    = 500 * time.Millisecond
	shareReadsFor      = 500 * time.Millisecond
)

// read reads a Snapshot of the cluster. What cannot be read is listed in
// Errors; the rest is filled in.
func (p *Page) read(ctx context.Context, window time.Duration) Snapshot {
	cfg := p.cfg
	ctx, cancel := context.WithTimeout(ctx, cfg.ReadTimeout)
	defer cancel()
	local := time.Now()
	c := status.Read(ctx, status.Source{Leadership: cfg.Leadership, Pool: cfg.Pool, Jobs: cfg.Jobs})
	s := Snapshot{
		Instance: cfg.Instance, Version: cfg.Version, Now: local, LocalNow: local, WindowSeconds: window.Seconds(),
		Jobs: c.Jobs, LeadersKnown: c.LeadersKnown, Backend: c.Backend, Drained: c.Drained,
		Terms: []status.TermRecord{}, Rejections: []status.Rejection{}, Errors: c.Errors,
	}
	fail := func(err error) { s.Errors = append(s.Errors, err.Error()) }
	if cfg.Pool != nil {
		if err := cfg.Pool.QueryRow(ctx, `SELECT now()`).Scan(&s.Now); err != nil {
			fail(fmt.Errorf("database clock: %w", err))
			s.Now = s.LocalNow
		}
		terms, rejections, err := status.History(ctx, cfg.Pool, s.Now.Add(-window))
		if err != nil {
			fail(err)
		}
		if terms != nil {
			s.Terms = terms
		}
		if rejections != nil {
			s.Rejections = rejections
		}
	}
	if cfg.DevControl != "" {
		dev, err := fetchDevState(ctx, cfg.DevControl)
		if err != nil {
			fail(fmt.Errorf("dev supervisor at %s: %w", cfg.DevControl, err))
		} else {
			s.Dev = dev
		}
	}
	s.Instances = instances(c.Instances, s.Jobs, s.Terms, s.Dev)
	return s
}

// instances merges the instances that are up, the leaders of the jobs, the
// names seen in the history and the dev supervisor's children, sorted by name.
func instances(up []status.Instance, jobs []status.Job, terms []status.TermRecord, dev *DevState) []Instance {
	byName := map[string]*Instance{}
	get := func(name string) *Instance {
		if in, ok := byName[name]; ok {
			return in
		}
		in := &Instance{Instance: status.Instance{Name: name}}
		byName[name] = in
		return in
	}
	for _, r := range up {
		get(r.Name).Instance = r
	}
	leads := map[string]int{}
	for _, j := range jobs {
		if j.Leader != nil {
			leads[j.Leader.Instance]++
		}
	}
	for name, n := range leads {
		get(name).Leads = n
	}
	for _, t := range terms {
		get(t.Instance).Terms++
	}
	if dev != nil {
		for _, d := range dev.Instances {
			in := get(d.Name)
			in.Process = d.State
			if in.PID == 0 {
				in.PID = d.PID
			}
		}
	}
	out := make([]Instance, 0, len(byName))
	for _, in := range byName {
		out = append(out, *in)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// fetchDevState asks the dev supervisor for its children.
func fetchDevState(ctx context.Context, control string) (*DevState, error) {
	ctx, cancel := context.WithTimeout(ctx, devStateTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, control+"/dev/state", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /dev/state: %s", resp.Status)
	}
	var st DevState
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return nil, fmt.Errorf("GET /dev/state: %w", err)
	}
	st.Control = control
	slices.SortFunc(st.Instances, func(a, b DevInstance) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return &st, nil
}
