// Package builtin lists the job types built into snip-jobs: the one place to
// add one. The service and the tools around it (the dev cluster) read the
// same list.
package builtin

import (
	"fmt"

	"github.com/snip/snip-jobs/jobs/aggregator"
	"github.com/snip/snip-jobs/jobs/certrenew"
	"github.com/snip/snip-jobs/jobs/certsync"
	"github.com/snip/snip-jobs/jobs/execjob"
	"github.com/snip/snip-jobs/jobs/sqljob"
	"github.com/snip/snip-jobs/jobs/weeklyreport"
	"github.com/snip/snip-jobs/scheduler"
)

// Registry returns every built-in job type.
func Registry() *scheduler.Registry {
	r, err := scheduler.NewRegistry(
		sqljob.Type(),
		aggregator.Type(),
		weeklyreport.Type(),
		certrenew.Type(),
		certsync.Type(),
		execjob.Type(),
	)
	if err != nil {
		panic(fmt.Sprintf("snip-jobs: job type registry: %v", err)) // a programming error
	}
	return r
}
