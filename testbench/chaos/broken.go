package chaos

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// brokenPatches make the deliberately broken build (Options.Broken): the two
// defences the checker must see fail, removed at build time through
// `go build -overlay`, so that the product's own files carry no switch for
// it. Each patch inserts its text after a line that must occur exactly once;
// a file that no longer has it fails the build, naming the patch to update.
var brokenPatches = []struct {
	file, after, insert, what string
}{
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

// brokenOverlay writes the patched files and the overlay that substitutes
// them into dir, and returns the overlay's path (for go build -overlay).
func brokenOverlay(root, dir string) (string, error) {
	replace := map[string]string{}
	for _, p := range brokenPatches {
		src := filepath.Join(root, p.file)
		b, err := os.ReadFile(src)
		if err != nil {
			return "", fmt.Errorf("broken build: %w", err)
		}
		if n := strings.Count(string(b), p.after); n != 1 {
			return "", fmt.Errorf("broken build (%s): %s has the line %q %d times, want once: update brokenPatches in testbench/chaos/broken.go",
				p.what, p.file, strings.TrimSpace(p.after), n)
		}
		patched := filepath.Join(dir, "broken-"+strings.ReplaceAll(p.file, "/", "-"))
		text := strings.Replace(string(b), p.after, p.after+p.insert, 1)
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
