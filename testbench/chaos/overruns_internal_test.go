package chaos

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snip/snip-jobs/scheduler"
)

// An overrun is counted per job, and its story is its instance's lines about
// the same job and token, from the overrun line to the end of that lead.
func TestAnOverrunsStoryIsItsTermsLinesUntilTheLeadIsOver(t *testing.T) {
	in := &instance{name: "server-a", logPath: filepath.Join(t.TempDir(), "server-a.log")}
	log := strings.Join([]string{
		`{"msg":"term started","job":"script","token":7}`,
		`{"msg":"` + scheduler.MsgOverrun + `","job":"script","token":7}`,
		`{"msg":"lease granted","token":0}`,
		`{"msg":"term started","job":"probe","token":8}`,
		`{"msg":"program stopped","job":"script","token":7,"stop_to_gone":"4.1s"}`,
		`{"msg":"term over","job":"script","token":7}`,
		`{"msg":"program started","job":"script","token":9}`,
	}, "\n") + "\n"
	if err := os.WriteFile(in.logPath, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	n, story := overruns([]*instance{in})
	if len(n) != 1 || n["script"] != 1 {
		t.Errorf("overruns %v, want script 1", n)
	}
	if len(story) != 3 || !strings.Contains(story[1], "stop_to_gone") || !strings.HasPrefix(story[0], "server-a: ") || !strings.Contains(story[2], "term over") {
		t.Errorf("story:\n%s\nwant the overrun, the program's stop and the term's end, each named by its instance", strings.Join(story, "\n"))
	}
}
