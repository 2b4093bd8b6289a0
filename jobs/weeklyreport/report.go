package weeklyreport

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// Report is one calendar week's clicks. It is what the JSON body of a stored
// report holds; Stored describes the row when the report was read back.
type Report struct {
	Week          string       `json:"week"`          // ISO week, e.g. "2026-W47"
	PreviousWeek  string       `json:"previous_week"` // the week the growth lists compare with
	TimeZone      string       `json:"time_zone"`     // whose calendar the week and days are
	Start         time.Time    `json:"start"`         // Monday 00:00 local
	End           time.Time    `json:"end"`           // the next Monday 00:00 local (exclusive)
	Total         int64        `json:"total_clicks"`
	PreviousTotal int64        `json:"previous_total_clicks"`
	LinksClicked  int          `json:"links_clicked"` // links with at least one click in the week
	Days          []Day        `json:"days"`          // Monday to Sunday, always 7
	Top           []LinkClicks `json:"top_links"`     // most clicked first, at most Options.Top
	GrewMost      []Growth     `json:"grew_most"`     // by absolute increase
	GrewFastest   []Growth     `json:"grew_fastest"`  // by relative increase
	Options       Options      `json:"options"`       // what the lists were built with
	Stored        Stored       `json:"-"`
}

// Day is one local calendar day of the week.
type Day struct {
	Date    string    `json:"date"` // 2026-03-29
	Weekday string    `json:"weekday"`
	Start   time.Time `json:"start"`
	// Hours is the day's length: 24, or 23 and 25 on the days clocks change.
	Hours  int   `json:"hours"`
	Clicks int64 `json:"clicks"`
}

// LinkClicks is one link's clicks in the week.
type LinkClicks struct {
	ID     int64  `json:"link_id"`
	Slug   string `json:"slug"` // "" if the link is no longer in links
	Clicks int64  `json:"clicks"`
}

// Growth is a link that had more clicks than in the week before.
type Growth struct {
	ID       int64  `json:"link_id"`
	Slug     string `json:"slug"`
	Previous int64  `json:"previous_clicks"`
	Clicks   int64  `json:"clicks"`
	Increase int64  `json:"increase"` // Clicks - Previous, > 0
	// Relative is Increase / Previous (1.5 = +150 %). It is null when
	// Previous is 0: growth from nothing has no ratio, and such a link is
	// shown as "new". Links with Previous 0 are ranked in GrewMost only.
	Relative *float64 `json:"relative_increase"`
}

// Stored is the row a report was read from (Show).
type Stored struct {
	Job          string
	Token        int64  // the token of the write that produced this content
	Instance     string // the instance that made it
	CreatedAt    time.Time
	ReplacedAt   time.Time // zero if never replaced
	Replacements int
	Text, CSV    string // as stored: what the mailer sends
}

// Subject is the mail's subject line.
func (r *Report) Subject() string {
	last := r.End.Add(-time.Nanosecond)
	return fmt.Sprintf("Snip weekly report %s (%s to %s): %d clicks",
		r.Week, r.Start.Format("Mon 2 Jan"), last.Format("Mon 2 Jan 2006"), r.Total)
}

// clicksSQL sums each link's clicks per local day of the two weeks: $1 holds
// the 15 day boundaries, and width_bucket numbers the days 1 to 14. One
// statement, so one snapshot: totals, days and lists agree with each other.
const clicksSQL = `
SELECT c.link_id, l.slug, c.day, c.clicks
FROM (
	SELECT link_id, width_bucket(hour, $1::timestamptz[]) AS day, sum(clicks)::bigint AS clicks
	FROM link_hourly_counts
	WHERE hour >= $2 AND hour < $3
	GROUP BY link_id, day
) c
LEFT JOIN links l ON l.id = c.link_id`

// build reads the clicks of s's two weeks and makes the report.
func build(ctx context.Context, tx pgx.Tx, s span, opts Options) (*Report, error) {
	rows, err := tx.Query(ctx, clicksSQL, s.bounds[:], s.bounds[0], s.bounds[14])
	if err != nil {
		return nil, fmt.Errorf("read clicks of %s and %s: %w", s.previous, s.label, err)
	}
	var counts []dayCount
	var c dayCount
	_, err = pgx.ForEachRow(rows, []any{&c.link, &c.slug, &c.day, &c.clicks}, func() error {
		counts = append(counts, c)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read clicks of %s and %s: %w", s.previous, s.label, err)
	}
	return assemble(s, opts, counts), nil
}

// dayCount is one link's clicks on one day: day 1-7 the previous week, 8-14
// the report's.
type dayCount struct {
	link   int64
	slug   *string
	day    int
	clicks int64
}

// assemble makes the report from the per-day counts. The lists are ordered
// fully (ties by link id), so the same counts always give the same report.
func assemble(s span, opts Options, counts []dayCount) *Report {
	r := frame(s, opts)
	links := r.sum(counts)
	r.rank(links, opts)
	return r
}

// frame is the report of span s with its seven days and no clicks yet.
func frame(s span, opts Options) *Report {
	r := &Report{
		Week:         s.label,
		PreviousWeek: s.previous,
		TimeZone:     s.loc.String(),
		Start:        s.start().In(s.loc),
		End:          s.end().In(s.loc),
		Days:         make([]Day, 7),
		Top:          []LinkClicks{},
		GrewMost:     []Growth{},
		GrewFastest:  []Growth{},
		Options:      opts,
	}
	for i := range r.Days {
		d := s.monday.AddDate(0, 0, i)
		r.Days[i] = Day{
			Date:    d.Format(time.DateOnly),
			Weekday: d.Weekday().String(),
			Start:   s.bounds[7+i].In(s.loc),
			Hours:   int(s.bounds[8+i].Sub(s.bounds[7+i]) / time.Hour),
		}
	}
	return r
}

// linkWeeks is one link's clicks in the previous week and this one.
type linkWeeks struct {
	id             int64
	slug           string
	previous, this int64
}

// sum adds counts (days 1–7: the previous week, 8–14: this one) to r's
// totals and days, and returns them per link.
func (r *Report) sum(counts []dayCount) map[int64]*linkWeeks {
	byID := map[int64]*linkWeeks{}
	for _, c := range counts {
		l := byID[c.link]
		if l == nil {
			l = &linkWeeks{id: c.link}
			if c.slug != nil {
				l.slug = *c.slug
			}
			byID[c.link] = l
		}
		switch {
		case c.day >= 1 && c.day <= 7:
			l.previous += c.clicks
			r.PreviousTotal += c.clicks
		case c.day >= 8 && c.day <= 14:
			l.this += c.clicks
			r.Total += c.clicks
			r.Days[c.day-8].Clicks += c.clicks
		}
	}
	return byID
}

// rank fills r's top links and its two growth lists from links.
func (r *Report) rank(links map[int64]*linkWeeks, opts Options) {
	var top []LinkClicks
	var grew, fastest []Growth
	for _, l := range links {
		if l.this > 0 {
			r.LinksClicked++
			top = append(top, LinkClicks{ID: l.id, Slug: l.slug, Clicks: l.this})
		}
		if l.this <= l.previous {
			continue
		}
		g := Growth{ID: l.id, Slug: l.slug, Previous: l.previous, Clicks: l.this, Increase: l.this - l.previous}
		if l.previous > 0 {
			rel := float64(g.Increase) / float64(l.previous)
			g.Relative = &rel
		}
		grew = append(grew, g)
		if l.previous >= opts.GrowthMinPrevious {
			fastest = append(fastest, g)
		}
	}
	slices.SortFunc(top, func(a, b LinkClicks) int {
		return cmp.Or(cmp.Compare(b.Clicks, a.Clicks), cmp.Compare(a.ID, b.ID))
	})
	slices.SortFunc(grew, func(a, b Growth) int {
		return cmp.Or(cmp.Compare(b.Increase, a.Increase), cmp.Compare(b.Clicks, a.Clicks), cmp.Compare(a.ID, b.ID))
	})
	slices.SortFunc(fastest, func(a, b Growth) int {
		return cmp.Or(cmp.Compare(*b.Relative, *a.Relative), cmp.Compare(b.Increase, a.Increase), cmp.Compare(a.ID, b.ID))
	})
	r.Top = append(r.Top, top[:min(len(top), opts.Top)]...)
	r.GrewMost = append(r.GrewMost, grew[:min(len(grew), opts.Growth)]...)
	r.GrewFastest = append(r.GrewFastest, fastest[:min(len(fastest), opts.Growth)]...)
}

// encode returns the three stored forms of r: JSON, plain text and CSV.
func encode(r *Report) (body []byte, text, csv string, err error) {
	body, err = json.Marshal(r)
	if err != nil {
		return nil, "", "", fmt.Errorf("encode report %s: %w", r.Week, err)
	}
	return body, r.Text(), r.CSV(), nil
}
