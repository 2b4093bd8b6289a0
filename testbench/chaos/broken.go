package chaos

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// brokenPatch removes a defence the checker must see fail, at build time
// through `go build -overlay`, so that the product's own files carry no
// switch for it. It inserts its text after a line that must occur exactly
// once; a file that no longer has it fails the build, naming the patch to
// update.
type brokenPatch struct {
	file, after, insert, what string
}

// brokenPatches make the deliberately broken build (Options.Broken): the
// two defences of leadership removed.
var brokenPatches = []brokenPatch{
	{
		file:   "leadership/config.go",
		after:  "\tc.TTL, c.Margin, c.RenewInterval = TimingDefaults(c.Rules, c.TTL, c.Margin, c.RenewInterval)\n",
		insert: "\tc.Margin = 0 // the chaos harness's broken build\n",
		what:   "stop-early margin zero: a term stays valid until the instant etcd could expire its lease",
	},
	{
		file:  "fencing/fence.go",
		after: "\tdefer func() { _ = tx.Rollback(ctx) }()\n",
		insert: "\tif true { // the chaos harness's broken build: no token check, no row lock\n" +
			"\t\tif err := fn(ctx, tx); err != nil {\n\t\t\treturn err\n\t\t}\n\t\treturn tx.Commit(ctx)\n\t}\n",
		what: "fence check disabled: Do runs the caller's function in a plain transaction",
	},
}

// brokenManualPatches make the broken manual build (Options.BrokenManual):
// the weekly report's manual run, as before it completed its request in its
// own transaction. Its transaction stores the week (or finds it stored) and
// completes nothing; the scheduler then completes the request after the
// run's end is recorded, in a transaction of its own, so a claimer that dies
// between the two leaves the request to its successor, which runs it again.
var brokenManualPatches = []brokenPatch{
	{
		file:  "jobs/weeklyreport/job.go",
		after: "\tlog := r.Log.With(\"week\", s.label)\n",
		insert: "\tif id := r.ManualRun; id != 0 { // the chaos harness's broken manual build: Complete does nothing\n" +
			"\t\tr.ManualRun = 0\n\t\tdefer func() { r.ManualRun = id }() // for the scheduler's completion after the run\n\t}\n",
		what: "the weekly report's manual run completed by the scheduler after the run, apart from its effect (at least once)",
	},
}

// broken reports whether o asks for a broken build.
func (o Options) broken() bool { return o.Broken || o.BrokenManual }

// brokenBuild returns the patches of o's broken build and the name of its
// binary.
func (o Options) brokenBuild() ([]brokenPatch, string) {
	var patches []brokenPatch
	name := "snip-jobs"
	if o.Broken {
		patches, name = append(patches, brokenPatches...), name+"-broken"
	}
	if o.BrokenManual {
		patches, name = append(patches, brokenManualPatches...), name+"-broken-manual"
	}
	return patches, name
}

// brokenLabel names o's build in the report.
func (o Options) brokenLabel() string {
	switch {
	case o.Broken && o.BrokenManual:
		return "true, and the weekly report's manual run completed apart"
	case o.BrokenManual:
		return "the weekly report's manual run completed apart"
	}
	return fmt.Sprint(o.Broken)
}

// brokenOverlay writes the files patched by patches and the overlay that
// substitutes them into dir, and returns the overlay's path (for go build
// -overlay).
func brokenOverlay(root, dir string, patches []brokenPatch) (string, error) {
	texts := map[string]string{} // a file patched so far
	for _, p := range patches {
		src := filepath.Join(root, p.file)
		text, ok := texts[src]
		if !ok {
			b, err := os.ReadFile(src)
			if err != nil {
				return "", fmt.Errorf("broken build: %w", err)
			}
			text = string(b)
		}
		if n := strings.Count(text, p.after); n != 1 {
			return "", fmt.Errorf("broken build (%s): %s has the line %q %d times, want once: update the patches in testbench/chaos/broken.go",
				p.what, p.file, strings.TrimSpace(p.after), n)
		}
		texts[src] = strings.Replace(text, p.after, p.after+p.insert, 1)
	}
	replace := map[string]string{}
	for src, text := range texts {
		patched := filepath.Join(dir, "broken-"+strings.ReplaceAll(strings.TrimPrefix(src, root+"/"), "/", "-"))
		if err := os.WriteFile(patched, []byte(text), 0o600); err != nil {
			return "", err
		}
		replace[src] = patched
	}
	overlay := filepath.Join(dir, "broken-overlay.json")
	b, err := json.Marshal(map[string]any{"Replace": replace})
	if err != nil {
		return "", err
	}
	return overlay, os.WriteFile(overlay, b, 0o600)
}
