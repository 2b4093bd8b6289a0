package chaos

import (
	"fmt"
	"html"
	"strings"
)

// Plot draws a soak's series as small multiples in one SVG: each instance's
// resident memory, goroutines and open files, PostgreSQL's connections, the
// judged tables' rows, etcd's keys and leases, each panel over the whole
// soak, the second half (the fitted part) shaded. Plain SVG: any browser or
// Markdown viewer shows it.
func (r *SoakReport) Plot() string {
	type line struct {
		label string
		at    []float64 // minutes since the first sample
		v     []float64
	}
	type panel struct {
		title, unit string
		scale       float64
		lines       []line
	}
	if len(r.Samples) < 2 {
		return ""
	}
	t0 := r.Samples[0].At
	mk := func(label string, get func(Sample) (float64, bool)) line {
		l := line{label: label}
		for _, s := range r.Samples {
			if v, ok := get(s); ok {
				l.at, l.v = append(l.at, s.At.Sub(t0).Minutes()), append(l.v, v)
			}
		}
		return l
	}
	proc := func(title, unit string, scale float64, get func(ProcSample) float64) panel {
		p := panel{title: title, unit: unit, scale: scale}
		for _, name := range instanceNames(r.Samples) {
			p.lines = append(p.lines, mk(name, func(s Sample) (float64, bool) { ps, ok := s.Instances[name]; return get(ps), ok }))
		}
		return p
	}
	rows := panel{title: "rows of the bounded tables", unit: "rows", scale: 1}
	for _, t := range SoakTables {
		rows.lines = append(rows.lines, mk(t, func(s Sample) (float64, bool) { n, ok := s.Rows[t]; return float64(n), ok }))
	}
	panels := []panel{
		proc("resident memory", "MiB", 1<<20, func(p ProcSample) float64 { return p.RSS }),
		proc("goroutines", "", 1, func(p ProcSample) float64 { return p.Goroutines }),
		proc("open files", "", 1, func(p ProcSample) float64 { return p.FDs }),
		{title: "PostgreSQL connections", scale: 1, lines: []line{mk("connections", func(s Sample) (float64, bool) { return float64(s.PGConnections), true })}},
		rows,
		{title: "etcd", scale: 1, lines: []line{
			mk("keys", func(s Sample) (float64, bool) { return float64(s.EtcdKeys), true }),
			mk("leases", func(s Sample) (float64, bool) { return float64(s.EtcdLeases), true })}},
	}
	const w, h, cols, pad = 420, 220, 2, 40
	colors := []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"}
	rowsN := (len(panels) + cols - 1) / cols
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", cols*w, rowsN*h)
	b.WriteString(`<rect width="100%" height="100%" fill="white"/>` + "\n")
	total := r.Samples[len(r.Samples)-1].At.Sub(t0).Minutes()
	for i, p := range panels {
		ox, oy := (i%cols)*w, (i/cols)*h
		pw, ph := float64(w-2*pad), float64(h-2*pad)
		lo, hi := 0.0, 1.0
		first := true
		for _, l := range p.lines {
			for _, v := range l.v {
				v /= p.scale
				if first {
					lo, hi, first = v, v, false
				}
				lo, hi = min(lo, v), max(hi, v)
			}
		}
		lo, hi = min(lo, 0), hi*1.1+1e-9
		x := func(m float64) float64 { return float64(ox+pad) + pw*m/max(total, 1e-9) }
		y := func(v float64) float64 { return float64(oy+pad) + ph - ph*(v/p.scale-lo)/(hi-lo) }
		fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%.1f" fill="#f2f2f2"/>`+"\n", x(total/2), oy+pad, x(total)-x(total/2), ph)
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%.1f" fill="none" stroke="#999"/>`+"\n", ox+pad, oy+pad, pw, ph)
		title := p.title
		if p.unit != "" {
			title += " (" + p.unit + ")"
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="13">%s</text>`+"\n", ox+pad, oy+pad-8, html.EscapeString(title))
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%.0f</text><text x="%d" y="%.1f" text-anchor="end">%.0f</text>`+"\n",
			ox+pad-4, oy+pad+10, hi, ox+pad-4, float64(oy+pad)+ph, lo)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="end">%.0f min</text>`+"\n", x(total), oy+pad-8, total)
		lx := float64(ox + pad + 6)
		for j, l := range p.lines {
			var pts []string
			for k := range l.v {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(l.at[k]), y(l.v[k])))
			}
			c := colors[j%len(colors)]
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`+"\n", c, strings.Join(pts, " "))
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" fill="%s">%s</text>`+"\n", lx, float64(oy+pad)+ph+14, c, html.EscapeString(l.label))
			lx += 6.5*float64(len(l.label)) + 14
		}
	}
	b.WriteString("</svg>\n")
	return b.String()
}
