package execjob

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/snip/snip-jobs/internal/command"
)

// The bounds of what a program's output may cost the service: a line is cut
// at maxLine bytes (the rest of it, up to its newline, dropped), and lines
// beyond linesPerSecond (burst lineBurst) are dropped and counted; the
// service's memory holds at most maxLine, and its log grows at most that
// fast, whatever the program prints. The last tailLines lines (each cut at
// tailWidth) are kept for a failed run's record.
const (
	maxLine        = 4 << 10
	linesPerSecond = 100
	lineBurst      = 200
	tailLines      = 5
	tailWidth      = 200
)

// output is a run's stdout and stderr on their way to the service's log: line
// by line, redacted, bounded in size and rate.
type output struct {
	log     *slog.Logger // carries job, instance, token and run
	redact  *command.Redactor
	limit   *rate.Limiter
	dropped func(lines int) // counts dropped lines (metrics)

	mu      sync.Mutex
	tail    []string
	drops   int // lines dropped since the last summary
	lastSay time.Time
}

func newOutput(log *slog.Logger, r *command.Redactor, dropped func(int)) *output {
	return &output{log: log, redact: r, limit: rate.NewLimiter(linesPerSecond, lineBurst), dropped: dropped}
}

// copy reads one stream (stdout or stderr) until EOF — when every process
// holding its write end is gone — logging each line.
func (o *output) copy(rd io.Reader, stream string) {
	br := bufio.NewReaderSize(rd, maxLine)
	for {
		line, err := br.ReadSlice('\n')
		cut := errors.Is(err, bufio.ErrBufferFull)
		if len(line) > 0 {
			o.line(stream, strings.TrimRight(string(line), "\r\n"), cut)
		}
		if cut {
			skipLine(br)
			continue
		}
		if err != nil {
			return
		}
	}
}

// skipLine drops the rest of a line that was cut, up to its newline.
func skipLine(br *bufio.Reader) {
	for {
		_, err := br.ReadSlice('\n')
		if !errors.Is(err, bufio.ErrBufferFull) {
			return
		}
	}
}

// line logs one line, if the rate allows; it is kept for the tail either way.
func (o *output) line(stream, text string, cut bool) {
	shown, _ := o.redact.Redact([]byte(text), maxLine)
	if cut {
		shown += " …(cut)"
	}
	o.mu.Lock()
	o.keep(shown)
	allowed := o.limit.Allow()
	if !allowed {
		o.drops++
	}
	drops := o.summary(false)
	o.mu.Unlock()
	if allowed {
		o.log.Info("program output", "stream", stream, "line", shown)
	}
	o.sayDrops(drops)
}

// keep adds a line to the tail (o.mu held).
func (o *output) keep(line string) {
	if r := []rune(line); len(r) > tailWidth {
		line = string(r[:tailWidth]) + "…"
	}
	o.tail = append(o.tail, line)
	if len(o.tail) > tailLines {
		o.tail = o.tail[len(o.tail)-tailLines:]
	}
}

// summary takes the drops to report: at most once a second, or all at the
// end (o.mu held).
func (o *output) summary(final bool) int {
	if o.drops == 0 || !final && time.Since(o.lastSay) < time.Second {
		return 0
	}
	n := o.drops
	o.drops, o.lastSay = 0, time.Now()
	return n
}

func (o *output) sayDrops(n int) {
	if n == 0 {
		return
	}
	o.dropped(n)
	o.log.Warn("program output dropped: more lines than the log takes", "lines", n, "limit_per_second", linesPerSecond)
}

// close reports the drops not reported yet; call it once both streams are
// copied.
func (o *output) close() {
	o.mu.Lock()
	n := o.summary(true)
	o.mu.Unlock()
	o.sayDrops(n)
}

// last is the tail of the output, for a failed run's record.
func (o *output) last() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.tail...)
}
