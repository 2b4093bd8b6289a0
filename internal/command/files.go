package command

import (
	"log/slog"

	"github.com/snip/snip-jobs/internal/unreadable"
)

// Unreadable is what a child process can be kept from reading here of the
// service's secret paths (scheduler.Env.Secrets): all of them where Landlock
// works, none otherwise, which it logs as a warning naming the job's child
// (what: "the program", "the reload command").
func Unreadable(log *slog.Logger, what string, secrets []string) []string {
	if len(secrets) == 0 {
		return nil
	}
	if err := unreadable.Available(); err != nil {
		log.Warn(what+" can read the service's secret files (it runs as the service's user): this kernel cannot hide them",
			"files", secrets, "err", err)
		return nil
	}
	return secrets
}
