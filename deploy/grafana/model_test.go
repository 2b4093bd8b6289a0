package grafana

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// minSchemaVersion is the oldest dashboard model this one may claim:
// Grafana 9's (36), the first where every panel's and query's datasource is
// a reference by type and uid, as written here.
const minSchemaVersion = 36

// panelTypes are the panel types the dashboard uses, all built into Grafana.
var panelTypes = []string{"row", "timeseries", "table", "stat"}

// The dashboard is a Grafana dashboard model: a uid, a title and a schema
// version Grafana migrates from; a Prometheus datasource variable that every
// panel and query names; panels with unique ids, placed on the 24-column
// grid without overlapping; every panel but a row with queries whose refIds
// are unique in it; and no variable in a query that the dashboard does not
// define (Grafana would send it as written).
func TestTheDashboardIsAValidGrafanaModel(t *testing.T) {
	d := load(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("uid %q, title %q: both are required", d.UID, d.Title)
	}
	if d.SchemaVersion < minSchemaVersion {
		t.Errorf("schemaVersion %d, want at least %d", d.SchemaVersion, minSchemaVersion)
	}
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		if v.Type == "datasource" && (v.Name != "datasource" || string(v.Query) != `"prometheus"`) {
			t.Errorf("datasource variable %s queries %s, want one named datasource of type prometheus", v.Name, v.Query)
		}
		if v.Type == "query" && (v.Datasource == nil || *v.Datasource != wantDS) {
			t.Errorf("variable %s: datasource %v, want %v", v.Name, v.Datasource, wantDS)
		}
	}
	if !vars["datasource"] {
		t.Fatal("no datasource variable")
	}
	ids := map[int]string{}
	var placed []panel
	for _, p := range d.allPanels() {
		if prev, ok := ids[p.ID]; ok || p.ID <= 0 {
			t.Errorf("panel %q: id %d (also %q): ids must be unique and positive", p.Title, p.ID, prev)
		}
		ids[p.ID] = p.Title
		checkPanel(t, p, vars)
		for _, q := range placed {
			if overlap(p.GridPos, q.GridPos) {
				t.Errorf("panels %q and %q overlap on the grid: %+v, %+v", p.Title, q.Title, p.GridPos, q.GridPos)
			}
		}
		placed = append(placed, p)
	}
}

// wantDS is what every panel and query names: the datasource variable.
var wantDS = dsRef{Type: "prometheus", UID: "${datasource}"}

// checkPanel checks one panel's type, place, datasource and queries.
func checkPanel(t *testing.T, p panel, vars map[string]bool) {
	t.Helper()
	if !slices.Contains(panelTypes, p.Type) || p.Title == "" {
		t.Errorf("panel %d: type %q, title %q", p.ID, p.Type, p.Title)
	}
	g := p.GridPos
	if g.W <= 0 || g.H <= 0 || g.X < 0 || g.Y < 0 || g.X+g.W > 24 {
		t.Errorf("panel %q: gridPos %+v is off the 24-column grid", p.Title, g)
	}
	if p.Datasource == nil || *p.Datasource != wantDS {
		t.Errorf("panel %q: datasource %v, want %v", p.Title, p.Datasource, wantDS)
	}
	if p.Type == "row" {
		return
	}
	if len(p.Targets) == 0 || p.Description == "" {
		t.Errorf("panel %q: %d queries, description %q: want both", p.Title, len(p.Targets), p.Description)
	}
	refs := map[string]bool{}
	for _, q := range p.Targets {
		if refs[q.RefID] || q.RefID == "" || q.Expr == "" || q.Datasource == nil || *q.Datasource != wantDS || q.Instant == q.Range {
			t.Errorf("panel %q, query %q: a unique refId, an expr, datasource %v and one of instant or range are required", p.Title, q.RefID, wantDS)
		}
		refs[q.RefID] = true
		for _, m := range regexp.MustCompile(`\$\{?(\w+)`).FindAllStringSubmatch(q.Expr, -1) {
			if !vars[m[1]] && !slices.Contains(grafanaVariables, m[1]) {
				t.Errorf("panel %q, query %s: $%s is not a variable of the dashboard nor one of Grafana's %v", p.Title, q.RefID, m[1], grafanaVariables)
			}
		}
	}
}

// grafanaVariables are Grafana's own variables the queries may use (and
// the query test substitutes).
var grafanaVariables = []string{"__rate_interval", "__interval", "__range"}

func overlap(a, b gridPos) bool {
	return a.X < b.X+b.W && b.X < a.X+a.W && a.Y < b.Y+b.H && b.Y < a.Y+a.H
}

// docs/dashboard.md describes every row (a heading of its title) and
// panel (its title in bold); the alerts the panels' descriptions and the
// docs name are alert rules of deploy/prometheus.
func TestTheDocsDescribeEveryPanelAndThePanelsNameRealAlerts(t *testing.T) {
	docs, err := os.ReadFile(filepath.Join("..", "..", "docs", "dashboard.md"))
	if err != nil {
		t.Fatal(err)
	}
	var rules []byte
	files, _ := filepath.Glob(filepath.Join("..", "prometheus", "*.rules.yml"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rules = append(rules, b...)
	}
	if len(rules) == 0 {
		t.Fatal("no alert rules in deploy/prometheus")
	}
	alerts := regexp.MustCompile(`\bSnip[A-Z]\w+`)
	for _, p := range load(t).allPanels() {
		want := "**" + p.Title + "**"
		if p.Type == "row" {
			want = "\n## " + p.Title + "\n"
		}
		if !strings.Contains(string(docs), want) {
			t.Errorf("docs/dashboard.md does not describe %s %q (%q)", p.Type, p.Title, want)
		}
		b, _ := json.Marshal(p.Description)
		for _, alert := range alerts.FindAllString(string(b), -1) {
			if !strings.Contains(string(rules), "alert: "+alert+"\n") {
				t.Errorf("panel %q names alert %s, which deploy/prometheus does not define", p.Title, alert)
			}
		}
	}
	for _, alert := range alerts.FindAllString(string(docs), -1) {
		if !strings.Contains(string(rules), "alert: "+alert+"\n") {
			t.Errorf("docs/dashboard.md names alert %s, which deploy/prometheus does not define", alert)
		}
	}
}
