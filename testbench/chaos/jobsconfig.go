package chaos

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/snip/snip-jobs/testbench/exectest"
)

// jobsYAML is the job list every instance runs.
// {{challenge}} becomes the instance's own HTTP-01 listener.
const jobsYAML = `  - name: probe
    type: sql
    singleton: true
    every: 1s
    grace: 2s
    options:
      statement: INSERT INTO chaos_probe (instance, token, trigger, manual_run) VALUES (@instance, @token, @trigger, @manual_run)
  - name: weekly-report
    type: weeklyreport
    singleton: true
    cron: "* * * * *"
    timezone: Europe/Paris
    grace: 5s
  - name: cert-renewer
    type: certrenew
    singleton: true
    every: 2s
    grace: 5s
    options:
      directory: %s
      ca_roots_file: %s
      email: ops@snip.example
      profile: %s
      challenge_listen: "{{challenge}}"
      key_file: %s
      lock_delay: 8s
      order_timeout: 10s
      require_public_tld: false
  - name: aggregator
    type: aggregator
    singleton: true
    continuous: true
    grace: 5s
    options:
      interval: 100ms
`

// scriptLoop is what the script job's program does after the watcher's
// prelude (package exectest: its tree, and a check that no process of an
// earlier run is alive as it starts): every half second, in a transaction of
// its own, it fences with snip_jobs_fence and writes a row naming its
// instance and token, logged like every job's writes (chaos_script); a
// refused write ends it (exit 1).
const scriptLoop = `while :; do
	PGAPPNAME="snip-jobs run $SNIP_JOBS_INSTANCE" "$PSQL" -X -q -o /dev/null -v ON_ERROR_STOP=1 -v resource="$SNIP_JOBS_RESOURCE" \
		-v token="$SNIP_JOBS_TOKEN" -v instance="$SNIP_JOBS_INSTANCE" "$DATABASE" <<'SQL' || exit 1
BEGIN;
SELECT snip_jobs_fence(:'resource', :token, :'instance');
INSERT INTO chaos_script (instance, token) VALUES (:'instance', :token);
COMMIT;
SQL
	sleep 0.5 & wait $!
done
`

// scriptKillGrace is the script job's kill_grace: its program, deaf to
// SIGTERM, writes until its SIGKILL, that long after its term ends (a
// pause or a drain is noticed), so the controls' checks allow its writes
// that much more than a renew interval.
const scriptKillGrace = 500 * time.Millisecond

// scriptJob writes the script job's program into the run's folder and
// returns its entry; {{database}} becomes the instance's own way to
// PostgreSQL (its proxy: a cut of the instance cuts its program off too).
func (c *cluster) scriptJob() (string, error) {
	dir := filepath.Join(c.dir, "script")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", err
	}
	cmd, err := exectest.Program(dir, scriptLoop)
	if err != nil {
		return "", err
	}
	c.scriptDir = dir
	return fmt.Sprintf(`  - name: script
    type: exec
    singleton: true
    continuous: true
    grace: 5s
    options:
      command: [%s, %s]
      env: {PSQL: %s, DATABASE: "{{database}}"}
      kill_grace: %v
`, cmd[0], cmd[1], filepath.Join(c.pg.Bindir(), "psql"), scriptKillGrace), nil
}
