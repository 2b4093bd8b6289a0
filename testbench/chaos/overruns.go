package chaos

import (
	"encoding/json"
	"strings"

	"github.com/snip/snip-jobs/scheduler"
)

// overrunLines bounds the lines kept of one overrun.
const overrunLines = 20

// overruns counts the overrun lines of the instances' logs (JSON, one object
// per line; every start of an instance appends to its file), per job, and
// keeps each overrun's story: the lines of its instance about that job and
// token from the overrun line until the lead was over ("term over"), which
// say what the run's stop waited on (execjob's "program stopped" says how
// long each of its phases took).
func overruns(instances []*instance) (map[string]int, []string) {
	n := map[string]int{}
	var story []string
	type term struct {
		job   string
		token int64
	}
	for _, in := range instances {
		open := map[term]int{} // lines kept of each overrun being followed
		for line := range strings.Lines(in.logs()) {
			var e struct {
				Msg, Job string
				Token    int64
			}
			if json.Unmarshal([]byte(line), &e) != nil {
				continue
			}
			k := term{e.Job, e.Token}
			if e.Msg == scheduler.MsgOverrun {
				n[e.Job]++
				open[k] = 0
			}
			kept, following := open[k]
			if !following {
				continue
			}
			if kept < overrunLines {
				story = append(story, in.name+": "+strings.TrimSpace(line))
				open[k]++
			}
			if e.Msg == "term over" {
				delete(open, k)
			}
		}
	}
	return n, story
}
