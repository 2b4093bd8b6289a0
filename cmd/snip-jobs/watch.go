package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"time"
)

// Terminal control for --watch: cursor home and clear the screen (as watch(1)
// does), and nothing else, so that any terminal that speaks ANSI redraws.
const clearScreen = "\x1b[H\x1b[2J"

// watchStatus redraws the status table every interval until ctx ends
// (Ctrl-C); each read is bounded by timeout. On a terminal each frame replaces
// the last; elsewhere (a pipe, a file) frames follow one another.
func watchStatus(ctx context.Context, w io.Writer, src *statusSource, interval, timeout time.Duration) {
	f, isFile := w.(*os.File)
	tty := isFile && isTerminal(f)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, timeout)
		st := src.read(rctx)
		cancel()
		if ctx.Err() != nil {
			return // a read cut short by Ctrl-C is not worth drawing
		}
		// One write per frame, so that the screen is never seen half drawn.
		var frame bytes.Buffer
		now := time.Now()
		if tty {
			frame.WriteString(clearScreen)
		}
		fmt.Fprintf(&frame, "snip-jobs status, every %v · %s · Ctrl-C stops\n\n", interval, now.Format("15:04:05"))
		printStatus(&frame, st, now)
		for _, e := range st.Errors {
			fmt.Fprintf(&frame, "\ncannot read: %s", e)
		}
		if len(st.Errors) > 0 {
			frame.WriteString("\n")
		}
		if !tty {
			frame.WriteString("\n")
		}
		_, _ = w.Write(frame.Bytes())
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
