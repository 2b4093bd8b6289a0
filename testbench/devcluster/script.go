package devcluster

import (
	"fmt"
	"os"
	"path/filepath"
)

// demoScript is the demo's exec job's program: every second, in a
// transaction of its own, it fences through snip_jobs_fence and writes a row
// naming its instance, token and pid; refused (a newer term wrote), it says
// so and exits 1. A program in any language fences the same way.
const demoScript = `# snip-dev's exec demo: a row a second, through the SQL fence.
trap 'echo "stopped (SIGTERM) after $n rows"; exit 0' TERM
n=0
echo "writing a row a second as $SNIP_JOBS_INSTANCE, token $SNIP_JOBS_TOKEN"
while :; do
	"$PSQL" -X -q -o /dev/null -v ON_ERROR_STOP=1 -v resource="$SNIP_JOBS_RESOURCE" -v token="$SNIP_JOBS_TOKEN" \
		-v instance="$SNIP_JOBS_INSTANCE" -v pid=$$ "$DEV_DATABASE" <<'SQL' || { echo "refused: a newer term has written"; exit 1; }
BEGIN;
SELECT snip_jobs_fence(:'resource', :token);
INSERT INTO dev_script_beats (instance, token, pid) VALUES (:'instance', :token, :pid);
COMMIT;
SQL
	n=$((n + 1))
	sleep 1 & wait $!
done
`

// writeDemoScript writes the demo's exec program into dir.
func writeDemoScript(dir string) (string, error) {
	p := filepath.Join(dir, "fenced-script.sh")
	if err := os.WriteFile(p, []byte(demoScript), 0o755); err != nil {
		return "", fmt.Errorf("devcluster: the exec demo's script: %w", err)
	}
	return p, nil
}
