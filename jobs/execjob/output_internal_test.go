package execjob

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/snip/snip-jobs/internal/command"
)

// records keeps what a logger logged.
type records struct {
	mu    sync.Mutex
	lines []slog.Record
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, rec.Clone())
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

// attr is the value of key on record rec ("" if absent).
func attr(rec slog.Record, key string) string {
	var v string
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value.String()
			return false
		}
		return true
	})
	return v
}

func newTestOutput(secrets ...string) (*output, *records, *int) {
	rec := &records{}
	dropped := new(int)
	return newOutput(slog.New(rec), command.NewRedactor(secrets), func(n int) { *dropped += n }), rec, dropped
}

// A program's output reaches the log line by line, its secrets redacted; a
// line longer than maxLine is cut and the rest of it dropped (the service
// reads at most maxLine of it into memory, newline or not); the last lines
// are kept for the run's record.
func TestOutputIsLoggedLineByLineCutAndRedacted(t *testing.T) {
	o, rec, _ := newTestOutput("hunter2-secret")
	long := strings.Repeat("x", 3*maxLine)
	o.copy(strings.NewReader("first\nthe password is hunter2-secret\n"+long+"\nafter the long one\nno newline at the end"), "stdout")
	o.close()
	var got []string
	for _, r := range rec.lines {
		if r.Message == "program output" {
			got = append(got, attr(r, "line"))
		}
	}
	want := []string{"first", "the password is [REDACTED]", strings.Repeat("x", maxLine) + " …(cut)", "after the long one", "no newline at the end"}
	if len(got) != len(want) {
		t.Fatalf("%d lines logged, want %d: %.200q", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: %.80q…, want %.80q…", i, got[i], want[i])
		}
	}
	tail := o.last()
	if len(tail) != tailLines || tail[len(tail)-1] != "no newline at the end" || strings.Contains(strings.Join(tail, ""), "hunter2") {
		t.Errorf("tail %q; want the last %d lines, redacted, cut at %d", tail, tailLines, tailWidth)
	}
	if n := len([]rune(tail[2])); n != tailWidth+1 {
		t.Errorf("a long line in the tail is %d runes, want %d and an ellipsis", n, tailWidth)
	}
}

// A program printing more lines than the log takes costs a counted drop,
// reported in a summary, never the service's memory: a million lines in one
// burst log at most the burst and the rest are counted.
func TestOutputBeyondTheRateIsDroppedAndCounted(t *testing.T) {
	o, rec, dropped := newTestOutput()
	const lines = 1_000_000
	pr, pw := io.Pipe()
	go func() {
		line := []byte("spam\n")
		for range lines {
			pw.Write(line)
		}
		pw.Close()
	}()
	o.copy(pr, "stderr")
	o.close()
	logged, said := 0, 0
	for _, r := range rec.lines {
		switch r.Message {
		case "program output":
			logged++
		case "program output dropped: more lines than the log takes":
			said++
		}
	}
	if logged+*dropped != lines || logged > lines/10 || said == 0 {
		t.Errorf("%d lines logged, %d dropped (in %d summaries) of %d; want all counted, most dropped, summaries said", logged, *dropped, said, lines)
	}
}
