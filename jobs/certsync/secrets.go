package certsync

import (
	"os"
	"strings"

	"github.com/snip/snip-jobs/internal/command"
)

// knownSecrets are the secret values the job can tell, for its redactor:
// the database password (password, as pgx parsed it from the URL), the
// lines of key_env's variable or key_file, and what the service's
// environment holds (command.EnvironmentSecrets).
func knownSecrets(password string, o Options) []string {
	out := command.DatabaseSecrets(password)
	b, _, _ := o.KeySource().Text() // loaded already; a failure here only loses this
	keys := strings.TrimSpace(string(b))
	if keys != "" {
		out = append(out, keys)
	}
	for _, line := range strings.Split(keys, "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			out = append(out, line)
		}
	}
	return append(out, command.EnvironmentSecrets(os.Environ(), o.KeyEnv)...)
}
