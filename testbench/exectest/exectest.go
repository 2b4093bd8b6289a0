// Package exectest is a program for the tests of the exec job type: a shell
// script that starts a process tree no process group holds, records it, and
// checks, as it starts, that no process of an earlier run is alive.
package exectest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// watcher starts a child that calls setsid and a daemon that double-forks
// (both deaf to SIGTERM), records every pid of its tree with its start time
// (so that a recycled pid is not taken for it) in tree-<pid>, ignores
// SIGTERM itself, and, as it starts, records in overlaps the processes of
// earlier runs (any tree-* file) still alive; then it appends
// "<instance> <token>" to starts and waits to be killed.
const watcher = `dir="$1"
alive() { [ "$(cut -d' ' -f22 /proc/$1/stat 2>/dev/null)" = "$2" ]; }
for f in "$dir"/tree-*; do
	[ -e "$f" ] || continue
	while read -r pid start; do alive "$pid" "$start" && echo "$pid $f" >> "$dir/overlaps"; done < "$f"
done
tree="$dir/tree-$$"
me() { echo "$1 $(cut -d' ' -f22 /proc/$1/stat)" >> "$tree"; }
me $$
setsid sh -c 'trap "" TERM; exec sleep 1000' & me $!
sh -c '(trap "" TERM; exec sleep 1000) & echo $! > "$1"' - "$dir/daemon-$$"
me "$(cat "$dir/daemon-$$")"
echo "$SNIP_JOBS_INSTANCE $SNIP_JOBS_TOKEN" >> "$dir/starts"
trap '' TERM
while :; do sleep 1; done
`

// Watcher writes the watcher program into dir and returns its command: the
// program and its argument (dir, where it keeps its records).
func Watcher(t testing.TB, dir string) []string {
	t.Helper()
	p := filepath.Join(dir, "watcher.sh")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+watcher), 0o755); err != nil {
		t.Fatal(err)
	}
	return []string{p, dir}
}

// Start is one start of the watcher: where, with which token.
type Start struct{ Instance, Token string }

// Starts lists the watcher's starts in dir, oldest first.
func Starts(t testing.TB, dir string) []Start {
	t.Helper()
	var out []Start
	for _, l := range lines(t, filepath.Join(dir, "starts")) {
		in, tok, _ := strings.Cut(l, " ")
		out = append(out, Start{in, tok})
	}
	return out
}

// Overlaps lists the processes of earlier runs a start found alive
// ("<pid> <tree file>"): none, if no program outlived its term.
func Overlaps(t testing.TB, dir string) []string {
	t.Helper()
	return lines(t, filepath.Join(dir, "overlaps"))
}

// Alive lists the processes of every run recorded in dir that are alive now.
func Alive(t testing.TB, dir string) []string {
	t.Helper()
	trees, err := filepath.Glob(filepath.Join(dir, "tree-*"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range trees {
		for _, l := range lines(t, f) {
			pid, start, _ := strings.Cut(l, " ")
			b, err := os.ReadFile("/proc/" + pid + "/stat")
			if err != nil {
				continue
			}
			s := string(b)
			if i := strings.LastIndexByte(s, ')'); i >= 0 {
				if f := strings.Fields(s[i+1:]); len(f) > 19 && f[19] == start && f[0] != "Z" {
					out = append(out, pid)
				}
			}
		}
	}
	return out
}

func lines(t testing.TB, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimRight(string(b), "\n"), "\n")
}
