package weeklyreport

import (
	"encoding/csv"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Text renders the report as plain text, the mail's body.
func (r *Report) Text() string {
	var b strings.Builder
	last := r.End.Add(-time.Nanosecond)
	fmt.Fprintf(&b, "Snip weekly report %s\n", r.Week)
	fmt.Fprintf(&b, "%s to %s (%s)\n\n", r.Start.Format("Monday 2 January 2006"), last.Format("Monday 2 January 2006"), r.TimeZone)

	fmt.Fprintf(&b, "Clicks: %d on %d %s (%s: %d%s)\n", r.Total, r.LinksClicked, plural(r.LinksClicked, "link", "links"),
		r.PreviousWeek, r.PreviousTotal, change(r.Total, r.PreviousTotal))

	b.WriteString("\nClicks per day\n")
	var days [][]string
	for _, d := range r.Days {
		note := ""
		switch {
		case d.Hours == 23:
			note = "23 hours: clocks went forward"
		case d.Hours == 25:
			note = "25 hours: clocks went back"
		case d.Hours != 24:
			note = fmt.Sprintf("%d hours", d.Hours)
		}
		days = append(days, []string{d.Start.Format("Mon 2 Jan"), strconv.FormatInt(d.Clicks, 10), note})
	}
	table(&b, days, "lrl")

	b.WriteString("\nTop links\n")
	var top [][]string
	for i, l := range r.Top {
		top = append(top, []string{strconv.Itoa(i+1) + ".", slug(l.Slug, l.ID), strconv.FormatInt(l.Clicks, 10)})
	}
	table(&b, top, "rlr")

	if r.Options.Growth > 0 {
		fmt.Fprintf(&b, "\nGrew most against %s\n", r.PreviousWeek)
		table(&b, growthRows(r.GrewMost), "rlrlrrr")
		fmt.Fprintf(&b, "\nGrew fastest against %s (links with at least %d %s then)\n",
			r.PreviousWeek, r.Options.GrowthMinPrevious, plural(int(r.Options.GrowthMinPrevious), "click", "clicks"))
		table(&b, growthRows(r.GrewFastest), "rlrlrrr")
	}
	return b.String()
}

func growthRows(gs []Growth) [][]string {
	var rows [][]string
	for i, g := range gs {
		rel := "new"
		if g.Relative != nil {
			rel = fmt.Sprintf("%+.1f%%", *g.Relative*100)
		}
		rows = append(rows, []string{strconv.Itoa(i+1) + ".", slug(g.Slug, g.ID),
			strconv.FormatInt(g.Previous, 10), "->", strconv.FormatInt(g.Clicks, 10),
			fmt.Sprintf("%+d", g.Increase), rel})
	}
	return rows
}

// change is the relative change from previous to now, e.g. ", +23.4%"; empty
// when previous is 0.
func change(now, previous int64) string {
	if previous == 0 {
		return ""
	}
	return fmt.Sprintf(", %+.1f%%", float64(now-previous)/float64(previous)*100)
}

func slug(s string, id int64) string {
	if s == "" {
		return fmt.Sprintf("(link %d, deleted)", id)
	}
	return s
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// table writes rows indented by two spaces, columns separated by two spaces
// and aligned left (l) or right (r) as align says; "  none" if there are no
// rows.
func table(b *strings.Builder, rows [][]string, align string) {
	if len(rows) == 0 {
		b.WriteString("  none\n")
		return
	}
	width := make([]int, len(align))
	for _, row := range rows {
		for i, cell := range row {
			width[i] = max(width[i], len(cell))
		}
	}
	for _, row := range rows {
		var line strings.Builder
		for i, cell := range row {
			pad := strings.Repeat(" ", width[i]-len(cell))
			line.WriteString("  ")
			if align[i] == 'r' {
				line.WriteString(pad + cell)
			} else {
				line.WriteString(cell + pad)
			}
		}
		b.WriteString(strings.TrimRight(line.String(), " ") + "\n")
	}
}

// CSV renders the report as one CSV table, the mail's attachment. Every row
// has the same columns; section says what a row is: total (the week), day,
// top, grew_most or grew_fastest. date is the first day of a total or day
// row; hours is its length.
func (r *Report) CSV() string {
	var b strings.Builder
	w := csv.NewWriter(&b)
	i64 := func(v int64) string { return strconv.FormatInt(v, 10) }
	rel := func(v *float64) string {
		if v == nil {
			return ""
		}
		return strconv.FormatFloat(*v, 'f', -1, 64)
	}
	rows := [][]string{{"section", "rank", "date", "hours", "link_id", "slug", "clicks", "previous_clicks", "increase", "relative_increase"}}
	var totalRel *float64
	if r.PreviousTotal > 0 {
		v := float64(r.Total-r.PreviousTotal) / float64(r.PreviousTotal)
		totalRel = &v
	}
	rows = append(rows, []string{"total", "", r.Start.Format(time.DateOnly), strconv.Itoa(int(r.End.Sub(r.Start) / time.Hour)),
		"", "", i64(r.Total), i64(r.PreviousTotal), i64(r.Total - r.PreviousTotal), rel(totalRel)})
	for _, d := range r.Days {
		rows = append(rows, []string{"day", "", d.Date, strconv.Itoa(d.Hours), "", "", i64(d.Clicks), "", "", ""})
	}
	for i, l := range r.Top {
		rows = append(rows, []string{"top", strconv.Itoa(i + 1), "", "", i64(l.ID), l.Slug, i64(l.Clicks), "", "", ""})
	}
	for _, list := range []struct {
		name string
		gs   []Growth
	}{{"grew_most", r.GrewMost}, {"grew_fastest", r.GrewFastest}} {
		for i, g := range list.gs {
			rows = append(rows, []string{list.name, strconv.Itoa(i + 1), "", "", i64(g.ID), g.Slug,
				i64(g.Clicks), i64(g.Previous), i64(g.Increase), rel(g.Relative)})
		}
	}
	_ = w.WriteAll(rows) // a strings.Builder does not fail
	return b.String()
}
