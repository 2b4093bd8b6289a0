// Package prometheus holds no code: its tests check the alert rules beside
// them with promtool (Debian's prometheus package; .ci/run installs it) and
// check that the rules, their tests, the example configuration and the code
// agree.
package prometheus

import (
	"bytes"
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-yaml"
)

// promtool finds promtool, and fails the test loudly without it.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not found: the alert rules are tested with it. Install Debian's prometheus package " +
			"(apt-get install --no-install-recommends prometheus), as .ci/run does")
	}
	return p
}

// run runs promtool with args in this folder and fails with its output.
func run(t *testing.T, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, promtool(t), args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
}

func TestTheExampleConfigAndItsRuleFilesAreValid(t *testing.T) {
	run(t, "check", "config", "prometheus.example.yml")
}

func TestEveryAlertRuleFileFiresAndStaysQuietOnItsSyntheticSeries(t *testing.T) {
	for _, f := range testFiles(t) {
		t.Run(f, func(t *testing.T) {
			t.Parallel()
			run(t, "test", "rules", f)
		})
	}
}

// ruleFile is the part of a rule file these tests read.
type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert string `yaml:"alert"`
			Expr  string `yaml:"expr"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// testFile is the part of a promtool test file these tests read.
type testFile struct {
	RuleFiles []string `yaml:"rule_files"`
	Tests     []struct {
		AlertRuleTest []struct {
			Alertname string `yaml:"alertname"`
			ExpAlerts []any  `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func ruleFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.rules.yml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no *.rules.yml here (%v)", err)
	}
	return files
}

func testFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.rules.test.yml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no *.rules.test.yml here (%v)", err)
	}
	return files
}

// A rule only ever expected to fire would pass as `vector(1)`, one only
// expected to stay quiet as nothing at all: each alert needs both.
func TestEveryAlertIsTestedBothFiringAndQuiet(t *testing.T) {
	fires, quiet := map[string]bool{}, map[string]bool{}
	tested := map[string]bool{}
	for _, f := range testFiles(t) {
		var tf testFile
		readYAML(t, f, &tf)
		for _, r := range tf.RuleFiles {
			tested[r] = true
		}
		for _, g := range tf.Tests {
			for _, a := range g.AlertRuleTest {
				if len(a.ExpAlerts) > 0 {
					fires[a.Alertname] = true
				} else {
					quiet[a.Alertname] = true
				}
			}
		}
	}
	var example struct {
		RuleFiles []string `yaml:"rule_files"`
	}
	readYAML(t, "prometheus.example.yml", &example)
	for _, f := range ruleFiles(t) {
		if !tested[f] {
			t.Errorf("%s is not loaded by any *.rules.test.yml", f)
		}
		if !slices.Contains(example.RuleFiles, f) {
			t.Errorf("%s is not in prometheus.example.yml's rule_files", f)
		}
		var rf ruleFile
		readYAML(t, f, &rf)
		for _, g := range rf.Groups {
			for _, r := range g.Rules {
				if r.Alert == "" {
					continue
				}
				if !fires[r.Alert] {
					t.Errorf("%s: alert %s is never expected to fire in a test", f, r.Alert)
				}
				if !quiet[r.Alert] {
					t.Errorf("%s: alert %s is never expected to stay quiet in a test", f, r.Alert)
				}
			}
		}
	}
}

// promtool accepts any series name: a typo would make an alert that never
// fires. Every snip_* series a rule reads must be one the code exports and
// docs/operations.md describes.
func TestTheRulesReadOnlySeriesTheCodeExportsAndTheDocsDescribe(t *testing.T) {
	exported := exportedNames(t, filepath.Join("..", ".."))
	docs, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	series := regexp.MustCompile(`\bsnip_[a-z_]+`)
	for _, f := range ruleFiles(t) {
		var rf ruleFile
		readYAML(t, f, &rf)
		for _, g := range rf.Groups {
			for _, r := range g.Rules {
				for _, name := range series.FindAllString(r.Expr, -1) {
					if !exported[name] {
						t.Errorf("%s: %s reads %s, which no Go file of the module names", f, r.Alert, name)
					}
					if !bytes.Contains(docs, []byte("`"+name)) {
						t.Errorf("%s: %s reads %s, which docs/operations.md does not describe", f, r.Alert, name)
					}
				}
			}
		}
	}
}

// exportedNames are the string literals that look like series names in the
// module's non-test Go files.
func exportedNames(t *testing.T, root string) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if s, err := strconv.Unquote(lit.Value); err == nil && strings.HasPrefix(s, "snip_") {
					names[s] = true
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(names) < 20 {
		t.Fatalf("found only %d series names in the module's Go files: %v", len(names), names)
	}
	return names
}
