package chaos

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/snip/snip-jobs/scheduler"
)

// What is kept of one overrun: its term's last lines before the overrun
// line, and its lines after it until its program or run ended.
const (
	overrunBefore = 8
	overrunAfter  = 12
)

// overruns counts the overrun lines of the instances' logs (JSON, one object
// per line; every start of an instance appends to its file), per job, and
// keeps each overrun's story: its instance's lines about that job and token
// (the last ones before the overrun line; after it, those until the run's
// end: execjob's "program stopped" says how long each phase of the stop
// took), and the instance's longest silence (no line of any job) in the
// grace before the overrun, which tells a process that was held (CPU, a
// blocked write of its log) from a stop that was slow.
func overruns(instances []*instance) (map[string]int, []string) {
	n := map[string]int{}
	var story []string
	type term struct {
		job   string
		token int64
	}
	for _, in := range instances {
		recent := map[term][]string{} // each term's last lines
		following := map[term]int{}   // lines kept after each overrun
		var times []time.Time         // of every line of the instance
		for line := range strings.Lines(in.logs()) {
			var e struct {
				Time     time.Time
				Msg, Job string
				Token    int64
				Grace    time.Duration // of the overrun line
			}
			if json.Unmarshal([]byte(line), &e) != nil {
				continue
			}
			times = append(times, e.Time)
			k, text := term{e.Job, e.Token}, in.name+": "+strings.TrimSpace(line)
			if kept, ok := following[k]; ok {
				story = append(story, text)
				if following[k] = kept + 1; kept+1 >= overrunAfter || e.Msg == "program stopped" || e.Msg == "run finished" {
					delete(following, k)
				}
				continue
			}
			if e.Job == "" {
				continue
			}
			if recent[k] = append(recent[k], text); len(recent[k]) > overrunBefore {
				recent[k] = recent[k][1:]
			}
			if e.Msg != scheduler.MsgOverrun {
				continue
			}
			n[e.Job]++
			story = append(story, recent[k]...)
			from := e.Time.Add(-e.Grace)
			story = append(story, fmt.Sprintf("%s: (its longest silence, no line of any job, from %s to the overrun: %v)",
				in.name, from.Format("15:04:05.000"), longestGap(times, from).Round(time.Millisecond)))
			following[k] = 0
			delete(recent, k)
		}
	}
	return n, story
}

// longestGap is the longest time between two consecutive times that ends
// after from.
func longestGap(times []time.Time, from time.Time) time.Duration {
	var gap time.Duration
	for i := len(times) - 1; i > 0 && times[i].After(from); i-- {
		gap = max(gap, times[i].Sub(times[i-1]))
	}
	return gap
}
