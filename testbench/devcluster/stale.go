package devcluster

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// sweepStale removes the folders of earlier dev clusters whose supervisor is
// gone without cleaning up (killed with SIGKILL): a folder named
// snip-jobs-dev-* in the temporary directory whose dev.pid names a process
// that no longer exists, and the PostgreSQL folder it recorded when that sits
// beside it (one in memory, pgcluster's next Create sweeps). Anything it
// cannot read or is not sure of is left alone.
func sweepStale(log *slog.Logger) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, "dev.pid"))
		if err != nil {
			continue // not a supervisor's folder (a PostgreSQL one), or not ours
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 || !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			continue // alive (or unknowable): another dev cluster that runs now
		}
		if pg, err := os.ReadFile(filepath.Join(dir, "pgdir")); err == nil {
			p := strings.TrimSpace(string(pg))
			if filepath.Dir(p) == filepath.Dir(dir) && strings.HasPrefix(filepath.Base(p), dirPrefix+"pg-") {
				_ = os.RemoveAll(p)
			}
		}
		if err := os.RemoveAll(dir); err == nil {
			log.Info("removed the folders of an earlier snip-dev that did not stop cleanly", "dir", dir, "pid", pid)
		}
	}
}
