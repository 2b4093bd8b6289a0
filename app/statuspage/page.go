package statuspage

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/snip/snip-jobs/scheduler/controls"
)

//go:embed assets
var assets embed.FS

var (
	static = mustSub(assets, "assets/static")
	tmpl   = template.Must(template.New("page.html").Funcs(template.FuncMap{
		"f":       func(v float64) string { return fmt.Sprintf("%.1f", v) },
		"short":   short,
		"clock":   clock,
		"since":   func(now, t time.Time) string { return since(now, t) },
		"seconds": func(s float64) string { return fmt.Sprintf("%.0fs", s) },
		"sub":     func(a, b float64) float64 { return a - b },
		"add":     func(a, b float64) float64 { return a + b },
		"colorOf": colorOf,
		"button":  button,
	}).ParseFS(assets, "assets/page.html"))
)

func mustSub(f fs.FS, dir string) fs.FS {
	s, err := fs.Sub(f, dir)
	if err != nil {
		panic(err)
	}
	return s
}

// Page serves the status page. Create it with New; it is an http.Handler for
// the paths under /status/.
type Page struct {
	cfg Config
	log *slog.Logger
	mux *http.ServeMux

	mu     sync.Mutex // one read of the cluster at a time; later requests share it
	last   Snapshot
	lastAt time.Time
	lastW  time.Duration
}

// New checks cfg and builds the page.
func New(cfg Config, log *slog.Logger) (*Page, error) {
	if cfg.Instance == "" {
		return nil, errors.New("statuspage: Instance is required")
	}
	if cfg.DevControl != "" {
		u, err := url.Parse(cfg.DevControl)
		if err != nil || u.Scheme != "http" || u.Host == "" || u.Path != "" && u.Path != "/" {
			return nil, fmt.Errorf("statuspage: DevControl %q: want http://host:port", cfg.DevControl)
		}
		cfg.DevControl = strings.TrimSuffix(cfg.DevControl, "/")
	}
	if cfg.ReadTimeout <= 0 {
		cfg.ReadTimeout = defaultReadTimeout
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Page{cfg: cfg, log: log, mux: http.NewServeMux()}
	p.mux.HandleFunc("GET /status/{$}", p.page)
	p.mux.HandleFunc("GET /status/live", p.live)
	p.mux.HandleFunc("GET /status/cluster.json", p.json)
	p.mux.Handle("GET /status/static/", http.StripPrefix("/status/static/", http.FileServerFS(static)))
	return p, nil
}

// ServeHTTP serves the routes under /status/.
func (p *Page) ServeHTTP(w http.ResponseWriter, r *http.Request) { p.mux.ServeHTTP(w, r) }

// Snapshot reads the cluster (or reuses a read of the same window made less
// than half a second ago). The read is shared, so a request that goes away
// does not cut it short; ReadTimeout bounds it.
func (p *Page) Snapshot(ctx context.Context, window time.Duration) Snapshot {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lastW == window && time.Since(p.lastAt) < shareReadsFor {
		return p.last
	}
	p.last, p.lastAt, p.lastW = p.read(context.WithoutCancel(ctx), window), time.Now(), window
	return p.last
}

// view is what the template renders.
type view struct {
	Snapshot
	TL Timeline
	// Back is this page's own URL, where the dev supervisor sends a browser
	// without JavaScript back to after a button.
	Back string
	// WindowParam is the window as given (?window=), "" for the default
	// (FitWindow).
	WindowParam string
	Windows     []windowLink
	// Pages are the dev supervisor's children other than this instance.
	Pages []DevInstance
	// Paused, Drained and Manual are the operators' controls in force:
	// paused jobs, drained instances, open manual runs.
	Paused  []controls.Pause
	Drained []controls.Drain
	Manual  []controls.Request
}

type windowLink struct {
	Label, Query, Title string
	Current             bool
}

// view reads what r asks for. fit: without ?window=, draw the window that
// fits the history (FitWindow) rather than DefaultWindow (the JSON keeps the
// window it read).
func (p *Page) view(r *http.Request, fit bool) (view, error) {
	window := DefaultWindow
	param := r.URL.Query().Get("window")
	if param != "" {
		d, err := time.ParseDuration(param)
		if err != nil || d < MinWindow || d > MaxWindow {
			return view{}, fmt.Errorf("window=%q: want a duration from %v to %v, e.g. 10m", param, MinWindow, MaxWindow)
		}
		window = d
	}
	s := p.Snapshot(r.Context(), window)
	if fit && param == "" {
		s.WindowSeconds = FitWindow(s).Seconds() // a shorter window of the same read
	}
	v := view{Snapshot: s, TL: Layout(s), WindowParam: param,
		Back: (&url.URL{Scheme: "http", Host: r.Host, Path: "/status/", RawQuery: r.URL.RawQuery}).String()}
	v.Windows = append(v.Windows, windowLink{Label: "fit", Query: "./", Current: param == "",
		Title: fmt.Sprintf("the history's age, up to %s", short(DefaultWindow))})
	for _, w := range []time.Duration{time.Minute, 5 * time.Minute, 15 * time.Minute, time.Hour} {
		v.Windows = append(v.Windows, windowLink{Label: short(w), Query: "?window=" + short(w), Current: param != "" && w == window})
	}
	for _, j := range s.Jobs {
		if j.Paused != nil {
			v.Paused = append(v.Paused, *j.Paused)
		}
		if j.ManualRun != nil {
			v.Manual = append(v.Manual, *j.ManualRun)
		}
	}
	v.Drained = s.Drained
	if s.Dev != nil {
		for _, d := range s.Dev.Instances {
			if d.Name != s.Instance {
				v.Pages = append(v.Pages, d)
			}
		}
	}
	return v, nil
}

func (p *Page) page(w http.ResponseWriter, r *http.Request) { p.render(w, r, "page") }
func (p *Page) live(w http.ResponseWriter, r *http.Request) { p.render(w, r, "live") }

func (p *Page) render(w http.ResponseWriter, r *http.Request, name string) {
	v, err := p.view(r, true)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var buf bytes.Buffer
	if err := tmpl.ExecuteTemplate(&buf, name, v); err != nil {
		p.log.Error("status page: render", "err", err)
		http.Error(w, "status page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	// Only this page's own scripts and styles; forms may post only to the dev
	// supervisor (in dev) or nowhere.
	csp := "default-src 'self'; frame-ancestors 'none'; form-action 'none'"
	if dev := p.cfg.DevControl; dev != "" {
		// The dev buttons post to the supervisor, which sends the browser back.
		csp = "default-src 'self'; frame-ancestors 'none'; connect-src 'self' " + dev + "; form-action 'self' " + dev
	}
	w.Header().Set("Content-Security-Policy", csp)
	_, _ = w.Write(buf.Bytes())
}

func (p *Page) json(w http.ResponseWriter, r *http.Request) {
	v, err := p.view(r, false)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v.Snapshot); err != nil {
		p.log.Debug("status page: write JSON", "err", err)
	}
}

// since is how long ago t was, from now; "?" for a zero t.
func since(now, t time.Time) string {
	if t.IsZero() {
		return "?"
	}
	return short(now.Sub(t))
}

// colorOf is an instance's colour on the timeline (grey if it has none).
func colorOf(v view, instance string) string {
	for _, c := range v.TL.Colors {
		if c.Instance == instance {
			return c.Color
		}
	}
	return "#999999"
}

// devButton is a form that posts one action to the dev supervisor.
type devButton struct {
	URL, Action, Key, Value, Job, Instance, Label, Title, Back string
}

func button(v view, action, key, value, label, title string) devButton {
	b := devButton{Action: action, Key: key, Value: value, Label: label, Title: title, Back: v.Back}
	if v.Dev != nil {
		b.URL = v.Dev.Control + "/dev/" + action
	}
	if key == "job" {
		b.Job = value
	} else {
		b.Instance = value
	}
	return b
}
