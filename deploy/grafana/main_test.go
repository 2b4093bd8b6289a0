// Package grafana holds no code: its tests check the dashboard beside them.
// Its JSON must be a valid Grafana dashboard model (model_test.go), and
// every query of every panel and variable, with the variables substituted
// as Grafana does, must parse and return data from a real Prometheus
// scraping a real test cluster (queries_test.go): a series renamed in the
// code returns nothing, and fails. No Grafana runs here (there is none on
// this machine); what Grafana would draw is not checked.
package grafana

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/snip/snip-jobs/testbench/clitest"
)

// snipJobs is the snip-jobs binary the test cluster runs, built once by TestMain.
var snipJobs string

func TestMain(m *testing.M) {
	os.Exit(clitest.Main(m, clitest.Binary{Pkg: "../../cmd/snip-jobs", Name: "snip-jobs", Path: &snipJobs}))
}

// dashboardFile is the dashboard.
const dashboardFile = "snip-jobs.json"

// dashboard is the part of Grafana's dashboard model the tests read.
type dashboard struct {
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID          int     `json:"id"`
	Type        string  `json:"type"`
	Title       string  `json:"title"`
	Description string  `json:"description"`
	Datasource  *dsRef  `json:"datasource"`
	GridPos     gridPos `json:"gridPos"`
	Targets     []struct {
		RefID      string `json:"refId"`
		Datasource *dsRef `json:"datasource"`
		Expr       string `json:"expr"`
		Instant    bool   `json:"instant"`
		Range      bool   `json:"range"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

type dsRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type gridPos struct {
	H, W, X, Y int
}

type variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"`
	Datasource *dsRef          `json:"datasource"`
	IncludeAll bool            `json:"includeAll"`
	AllValue   string          `json:"allValue"`
	Current    struct {
		Value json.RawMessage `json:"value"`
	} `json:"current"`
}

// load reads the dashboard.
func load(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// allPanels are the dashboard's panels, a collapsed row's included.
func (d dashboard) allPanels() []panel {
	var out []panel
	for _, p := range d.Panels {
		out = append(out, p)
		out = append(out, p.Panels...)
	}
	return out
}
