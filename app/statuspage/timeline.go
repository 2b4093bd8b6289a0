package statuspage

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/scheduler/status"
)

// Timeline is the drawing of the terms of each singleton led through etcd over
// the window that ends at the snapshot's Now: one lane per job, with pixel
// positions in the SVG's own units. It is computed by Layout, a pure function
// of a Snapshot, and rendered by the page's template.
type Timeline struct {
	Width, Height float64
	From, To      time.Time
	PlotX, PlotW  float64 // where the time axis runs
	AxisY         float64 // baseline of the tick labels
	Ticks         []Tick
	Lanes         []Lane
	// Unplaced are refused writes that belong to no lane: their token is not
	// one of the window's terms and their resource is not a job's name.
	Unplaced []status.Rejection
	// Colors gives each instance its colour, in name order.
	Colors []InstanceColor
}

// FitWindow is the window the page draws when none is asked for: the
// history's age (from the oldest term's start), rounded up to a step and
// bounded by DefaultWindow, so that a young cluster is not a row of slivers at
// the right edge. Without terms it is DefaultWindow.
func FitWindow(s Snapshot) time.Duration {
	if len(s.Terms) == 0 {
		return DefaultWindow
	}
	oldest := s.Terms[0].Started
	for _, t := range s.Terms {
		if t.Started.Before(oldest) {
			oldest = t.Started
		}
	}
	age := s.Now.Sub(oldest)
	for _, w := range fitSteps {
		if age <= w*9/10 { // a little room on the left of the oldest term
			return w
		}
	}
	return DefaultWindow
}

// fitSteps are the windows FitWindow picks from.
var fitSteps = []time.Duration{MinWindow, time.Minute, 2 * time.Minute, DefaultWindow}

// Tick is a mark on the time axis.
type Tick struct {
	X     float64
	Label string // "now", "-30s", "-1m30s"
}

// InstanceColor is an instance's colour on the timeline.
type InstanceColor struct {
	Instance, Color string
}

// Lane is one job's row.
type Lane struct {
	Job        string
	Y, H       float64 // top and height of the bars
	Sep        float64 // the line under the lane
	LabelY     float64 // baseline of the job's name
	Terms      []Bar
	Gaps       []Gap
	Rejections []Mark
	// Empty: no term of this job overlaps the window.
	Empty bool
}

// BarState says how a term's drawn end was found.
type BarState string

const (
	// Ended: the term's end was recorded (and precedes its successor's start).
	Ended BarState = "ended"
	// Ongoing: open, and etcd names it the job's leader now.
	Ongoing BarState = "ongoing"
	// Unclosed: its end was never recorded (its instance died or lost the
	// database); it is drawn up to its successor's start.
	Unclosed BarState = "unclosed"
	// Lost: open, no successor, and etcd does not name it the leader: it
	// ended at an unknown instant; it is drawn up to now.
	Lost BarState = "lost"
)

// Bar is one term on its lane.
type Bar struct {
	Token    int64
	Instance string
	Color    string
	State    BarState
	// Reason is why it ended, in words: as its instance recorded it, or as
	// the dev supervisor saw it (a killed or paused process).
	Reason string
	Start  time.Time // as recorded
	End    time.Time // as drawn: see BarState
	// ClippedLeft: it started before the window.
	ClippedLeft bool
	// LateEnd is when the instance itself recorded the end, later than the
	// end drawn (it was paused or cut off and noticed late; the successor
	// had recorded the end, or started, before); zero otherwise. The rest is
	// drawn as a tail.
	LateEnd time.Time
	// EndedBy is who recorded the end when not the instance itself: the
	// instance whose term replaced it, or "reclaim".
	EndedBy      string
	X, W         float64
	TailX, TailW float64
	Label        string // inside the bar when it fits
	Title        string // tooltip
}

// Gap is a span with no leader between two terms, or from the end of the last
// term until now.
type Gap struct {
	Start, End time.Time
	// Now: nobody leads at the right edge.
	Now   bool
	X, W  float64
	Label string // the duration, when it fits
	Title string
}

// Mark is a write refused by the fence.
type Mark struct {
	status.Rejection
	X     float64
	Title string
}

// Drawing constants, in SVG units.
const (
	svgWidth   = 1000.0
	labelWidth = 150.0
	rightPad   = 12.0
	axisHeight = 22.0
	laneHeight = 34.0
	barHeight  = 20.0
	bottomPad  = 8.0
	tailHeight = 3.0
)

// palette holds distinguishable colours (Okabe–Ito, readable by most colour
// blind people), assigned to instances in name order.
var palette = []string{"#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#999999"}

// Layout computes the timeline of s.
func Layout(s Snapshot) Timeline {
	window := s.Window()
	if window <= 0 {
		window = DefaultWindow
	}
	tl := Timeline{Width: svgWidth, From: s.Now.Add(-window), To: s.Now, PlotX: labelWidth, PlotW: svgWidth - labelWidth - rightPad, AxisY: 14}
	x := func(t time.Time) float64 {
		f := float64(t.Sub(tl.From)) / float64(window)
		return tl.PlotX + min(max(f, 0), 1)*tl.PlotW
	}
	tl.Colors = instanceColors(s)
	d := drawing{tl: tl, x: x, s: s, color: map[string]string{}, ends: devEnds(s.Dev), leader: map[string]int64{}}
	for _, c := range tl.Colors {
		d.color[c.Instance] = c.Color
	}
	for _, j := range s.Jobs {
		if j.Leader != nil {
			d.leader[j.Name] = j.Leader.Token
		}
	}
	jobs, byJob := laneJobs(s)
	for i, job := range jobs {
		lane := d.lane(job, byJob[job])
		top := axisHeight + float64(i)*laneHeight
		lane.Y, lane.H, lane.Sep, lane.LabelY = top+(laneHeight-barHeight)/2, barHeight, top+laneHeight, top+laneHeight/2+4
		tl.Lanes = append(tl.Lanes, lane)
	}
	placeRejections(&tl, x, s)
	tl.Ticks = ticks(window, x, s.Now)
	tl.Height = axisHeight + float64(max(len(tl.Lanes), 1))*laneHeight + bottomPad
	return tl
}

// instanceColors gives every instance the snapshot names its colour, in name
// order.
func instanceColors(s Snapshot) []InstanceColor {
	var names []string
	for _, in := range s.Instances {
		names = append(names, in.Name)
	}
	for _, t := range s.Terms {
		names = append(names, t.Instance)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	out := make([]InstanceColor, len(names))
	for i, n := range names {
		out[i] = InstanceColor{Instance: n, Color: palette[i%len(palette)]}
	}
	return out
}

// devEnds is the dev supervisor's words on ends, by job and token.
func devEnds(dev *DevState) map[string]map[int64]string {
	out := map[string]map[int64]string{}
	if dev == nil {
		return out
	}
	for _, e := range dev.Ends {
		if out[e.Job] == nil {
			out[e.Job] = map[int64]string{}
		}
		out[e.Job][e.Token] = e.Reason
	}
	return out
}

// laneJobs lists the lanes: the config's leader-mode jobs in order, then any
// other job the history names (another instance's config may have more);
// with each job's terms, by token.
func laneJobs(s Snapshot) ([]string, map[string][]status.TermRecord) {
	var jobs []string
	for _, j := range s.Jobs {
		if j.Mode == configs.ModeLeader.String() {
			jobs = append(jobs, j.Name)
		}
	}
	byJob := map[string][]status.TermRecord{}
	for _, t := range s.Terms {
		if _, seen := byJob[t.Job]; !seen && !slices.Contains(jobs, t.Job) {
			jobs = append(jobs, t.Job)
		}
		byJob[t.Job] = append(byJob[t.Job], t)
	}
	for _, terms := range byJob {
		slices.SortFunc(terms, func(a, b status.TermRecord) int { return cmp.Compare(a.Token, b.Token) })
	}
	return jobs, byJob
}

// drawing is what Layout draws lanes with.
type drawing struct {
	tl     Timeline // From and the plot's place
	x      func(time.Time) float64
	s      Snapshot
	color  map[string]string           // by instance
	ends   map[string]map[int64]string // the dev supervisor's words, by job and token
	leader map[string]int64            // the token etcd names the leader now, by job
}

// lane draws one job's terms (sorted by token) and the gaps between them.
func (d drawing) lane(job string, terms []status.TermRecord) Lane {
	tl, x, s := d.tl, d.x, d.s
	lane := Lane{Job: job}
	var prevEnd time.Time // drawn end of the previous term
	var last Bar          // the newest term, drawn or not
	for k, t := range terms {
		b := Bar{Token: t.Token, Instance: t.Instance, Color: d.color[t.Instance], Reason: EndReason(t.Reason), Start: t.Started}
		if t.EndedBy != t.Instance {
			b.EndedBy = t.EndedBy
		}
		if why := d.ends[job][t.Token]; why != "" {
			b.Reason = why
		}
		var next *status.TermRecord
		if k+1 < len(terms) {
			next = &terms[k+1]
		}
		switch {
		case !t.Ended.IsZero() && next != nil && t.Ended.After(next.Started):
			b.State, b.End, b.LateEnd = Ended, next.Started, t.Ended
		case !t.Ended.IsZero():
			b.State, b.End = Ended, t.Ended
			if t.Noticed.After(t.Ended) {
				b.LateEnd = t.Noticed
			}
		case next != nil:
			b.State, b.End = Unclosed, next.Started
		case !s.LeadersKnown || d.leader[job] == t.Token:
			b.State, b.End = Ongoing, s.Now
		default:
			b.State, b.End = Lost, s.Now
		}
		if b.End.Before(b.Start) {
			b.End = b.Start
		}
		if !prevEnd.IsZero() && b.Start.After(prevEnd) && b.Start.After(tl.From) {
			lane.Gaps = append(lane.Gaps, makeGap(tl, x, prevEnd, b.Start, false))
		}
		prevEnd, last = b.End, b
		if b.End.Before(tl.From) && (b.LateEnd.IsZero() || b.LateEnd.Before(tl.From)) {
			continue // entirely before the window
		}
		b.ClippedLeft = b.Start.Before(tl.From)
		b.X = x(b.Start)
		b.W = x(b.End) - b.X
		if !b.LateEnd.IsZero() {
			b.TailX = x(b.End)
			b.TailW = x(b.LateEnd) - b.TailX
		}
		b.Label = barLabel(b)
		b.Title = barTitle(b, next)
		lane.Terms = append(lane.Terms, b)
	}
	if len(terms) > 0 && last.State == Ended && last.End.Before(s.Now) {
		lane.Gaps = append(lane.Gaps, makeGap(tl, x, last.End, s.Now, true))
	}
	lane.Empty = len(lane.Terms) == 0
	return lane
}

// placeRejections marks each refused write on the lane of the term that
// tried it (or of the job its resource names); the rest are Unplaced.
func placeRejections(tl *Timeline, x func(time.Time) float64, s Snapshot) {
	jobOfToken := map[int64]string{}
	for _, t := range s.Terms {
		jobOfToken[t.Token] = t.Job
	}
	lanes := map[string]*Lane{}
	for i := range tl.Lanes {
		lanes[tl.Lanes[i].Job] = &tl.Lanes[i]
	}
	for _, r := range s.Rejections {
		lane := lanes[jobOfToken[r.Token]]
		if lane == nil {
			lane = lanes[r.Resource]
		}
		if lane == nil || r.At.Before(tl.From) || r.At.After(s.Now) {
			tl.Unplaced = append(tl.Unplaced, r)
			continue
		}
		lane.Rejections = append(lane.Rejections, Mark{Rejection: r, X: x(r.At), Title: fmt.Sprintf(
			"write refused by the fence at %s: %s (token %d) tried to write %q after token %d had",
			clock(r.At), r.Instance, r.Token, r.Resource, r.Current)})
	}
}

func makeGap(tl Timeline, x func(time.Time) float64, from, to time.Time, now bool) Gap {
	g := Gap{Start: from, End: to, Now: now}
	if from.Before(tl.From) {
		from = tl.From
	}
	g.X = x(from)
	g.W = x(to) - g.X
	d := g.End.Sub(g.Start)
	if g.W >= 46 {
		g.Label = "no leader " + short(d)
	} else if g.W >= 22 {
		g.Label = short(d)
	}
	if now {
		g.Title = fmt.Sprintf("no leader since %s (%s)", clock(g.Start), short(d))
	} else {
		g.Title = fmt.Sprintf("no leader from %s to %s (%s)", clock(g.Start), clock(g.End), short(d))
	}
	return g
}

func barLabel(b Bar) string {
	full := fmt.Sprintf("#%d %s", b.Token, b.Instance)
	switch {
	case b.W >= float64(len(full))*6.6+8:
		return full
	case b.W >= float64(len(fmt.Sprint(b.Token)))*6.6+14:
		return fmt.Sprintf("#%d", b.Token)
	}
	return ""
}

func barTitle(b Bar, next *status.TermRecord) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s, token %d, from %s", b.Instance, b.Token, clock(b.Start))
	switch b.State {
	case Ended:
		fmt.Fprintf(&sb, " to %s (%s)", clock(b.End), short(b.End.Sub(b.Start)))
		if b.Reason != "" {
			fmt.Fprintf(&sb, ", ended: %s", b.Reason)
		}
		switch {
		case b.EndedBy == "reclaim":
			fmt.Fprint(&sb, " (recorded by the reclaim of its dead process)")
		case b.EndedBy != "":
			fmt.Fprintf(&sb, " (recorded by %s, whose term replaced it)", b.EndedBy)
		}
		if !b.LateEnd.IsZero() {
			fmt.Fprintf(&sb, "; its instance recorded it at %s, after its term had ended: it was paused or cut off, and noticed late (the fence refuses its writes)",
				clock(b.LateEnd))
		}
	case Ongoing:
		fmt.Fprintf(&sb, ", leading now (%s)", short(b.End.Sub(b.Start)))
	case Unclosed:
		if b.Reason != "" {
			fmt.Fprintf(&sb, ", ended: %s", b.Reason)
		}
		fmt.Fprintf(&sb, "; its end was never recorded (the instance died or lost the database): drawn up to the start of token %d at %s",
			next.Token, clock(b.End))
	case Lost:
		if b.Reason != "" {
			fmt.Fprintf(&sb, ", ended: %s", b.Reason)
		}
		fmt.Fprint(&sb, "; no end recorded, and etcd no longer names it the leader: it ended at an unknown instant")
	}
	return sb.String()
}

// tickSteps are the spacings the axis may use.
var tickSteps = []time.Duration{5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second,
	time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute}

// ticks marks now and every step before it, with at most 10 steps.
func ticks(window time.Duration, x func(time.Time) float64, now time.Time) []Tick {
	step := tickSteps[len(tickSteps)-1]
	for _, s := range tickSteps {
		if window/s <= 10 {
			step = s
			break
		}
	}
	var out []Tick
	for ago := time.Duration(0); ago <= window; ago += step {
		label := "now"
		if ago > 0 {
			label = "-" + short(ago)
		}
		out = append(out, Tick{X: x(now.Add(-ago)), Label: label})
	}
	return out
}

// short formats a duration for people: 850ms, 4.2s, 1m30s, 2h5m.
func short(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < 10*time.Second && d%time.Second != 0:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		d = d.Round(time.Second)
		if d%time.Minute == 0 {
			return fmt.Sprintf("%dm", int(d.Minutes()))
		}
		return fmt.Sprintf("%dm%ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	d = d.Round(time.Minute)
	if d%time.Hour == 0 {
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dh%dm", int(d.Hours()), int(d.Minutes())%60)
}

// clock is an instant in UTC to the tenth of a second.
func clock(t time.Time) string { return t.UTC().Format("15:04:05.0") }
