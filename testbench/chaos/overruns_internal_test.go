package chaos

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snip/snip-jobs/scheduler"
)

// An overrun is counted per job, and its story is its instance's lines about
// the same job and token: the last ones before the overrun line, then those
// after it until its program stopped (past the lead's end), with the
// instance's longest silence in the grace before the overrun.
func TestAnOverrunsStoryIsItsTermsLinesUntilItsProgramStopped(t *testing.T) {
	in := &instance{name: "server-a", logPath: filepath.Join(t.TempDir(), "server-a.log")}
	log := strings.Join([]string{
		`{"time":"2026-12-07T10:00:00Z","msg":"term started","job":"script","token":7}`,
		`{"time":"2026-12-07T10:00:01Z","msg":"term ended","job":"script","token":7}`,
		`{"time":"2026-12-07T10:00:02Z","msg":"lease granted","token":0}`,
		`{"time":"2026-12-07T10:00:05.5Z","msg":"term started","job":"probe","token":8}`,
		`{"time":"2026-12-07T10:00:06Z","msg":"` + scheduler.MsgOverrun + `","job":"script","token":7,"grace":5000000000}`,
		`{"time":"2026-12-07T10:00:06.1Z","msg":"term over","job":"script","token":7}`,
		`{"time":"2026-12-07T10:00:07Z","msg":"program started","job":"script","token":9}`,
		`{"time":"2026-12-07T10:00:08Z","msg":"program stopped","job":"script","token":7,"stop_to_gone":"4.1s"}`,
		`{"time":"2026-12-07T10:00:09Z","msg":"program stopped","job":"script","token":9}`,
	}, "\n") + "\n"
	if err := os.WriteFile(in.logPath, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	n, story := overruns([]*instance{in})
	if len(n) != 1 || n["script"] != 1 {
		t.Errorf("overruns %v, want script 1", n)
	}
	want := []string{"term started", "term ended", "grace", "from 10:00:01.000 to the overrun: 3.5s", "term over", "stop_to_gone"}
	ok := len(story) == len(want)
	for i := 0; ok && i < len(want); i++ {
		ok = strings.HasPrefix(story[i], "server-a: ") && strings.Contains(story[i], want[i])
	}
	if !ok {
		t.Errorf("story:\n%s\nwant lines with %q, each named by its instance", strings.Join(story, "\n"), want)
	}
}
