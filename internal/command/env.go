// Package command is what the service gives a program it starts (certsync's
// reload command, an exec job's program) and takes back from it: an
// environment of its own, never the service's — which holds the database
// URL, sealing keys and passwords — and a Redactor for what the program
// prints and for its arguments in log lines.
//
// The service's secret files are kept from it too where Landlock works
// (Unreadable, internal/unreadable). What it does NOT guarantee: that a
// program cannot find a secret some other way (a file the config does not
// name, the service's /proc entries if the service were dumpable: it is
// not, see app/service). Redaction replaces the secrets it
// was given and what looks like one; a secret encoded otherwise passes.
package command

import "os"

// DefaultPath is a program's PATH when the service has none (or its PATH
// holds a secret).
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// passed are the service's variables a program gets, if they hold no secret:
// where to find commands, and the language and time zone to speak in.
var passed = []string{"LANG", "LC_ALL", "TZ"}

// Env is a program's whole environment: PATH (the service's, or
// DefaultPath), LANG, LC_ALL and TZ if the service has them, then extra
// ("NAME=value", the program's own). A variable of the service's is passed
// only if it is not among secretNames and r finds no secret in its value.
func Env(r *Redactor, secretNames []string, extra ...string) []string {
	pass := func(name string) (string, bool) {
		v, ok := os.LookupEnv(name)
		for _, s := range secretNames {
			ok = ok && name != s
		}
		return v, ok && !r.Has(v)
	}
	path, ok := pass("PATH")
	if !ok || path == "" {
		path = DefaultPath
	}
	env := []string{"PATH=" + path}
	for _, name := range passed {
		if v, ok := pass(name); ok {
			env = append(env, name+"="+v)
		}
	}
	return append(env, extra...)
}
