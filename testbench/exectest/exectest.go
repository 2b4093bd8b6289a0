// Package exectest is a program for the tests of the exec job type and the
// fault harness: a shell script that starts a process tree no process group
// holds, records it, and checks, as it starts, that no process of an
// earlier run is alive.
package exectest

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// prelude starts a child that calls setsid and a daemon that double-forks
// (both deaf to SIGTERM), records every pid of its tree with its start time
// (so that a recycled pid is not taken for it) in tree-<pid>, ignores
// SIGTERM itself, and, as it starts, records in overlaps the processes of
// earlier runs (any tree-* file) still alive (a zombie, killed and not yet
// reaped, is not: it runs nothing); then it appends "<instance> <token>" to
// starts. What follows it loops until the program is killed.
const prelude = `dir="$1"
alive() { set -- "$1" "$2" "$(cut -d' ' -f3,22 /proc/$1/stat 2>/dev/null)"; [ "${3#* }" = "$2" ] && [ "${3%% *}" != Z ]; }
for f in "$dir"/tree-*; do
	[ -e "$f" ] || continue
	while read -r pid start; do alive "$pid" "$start" && echo "$pid $f $(cut -d' ' -f3 /proc/$pid/stat 2>/dev/null)" >> "$dir/overlaps"; done < "$f"
done
tree="$dir/tree-$$"
me() { echo "$1 $(cut -d' ' -f22 /proc/$1/stat)" >> "$tree"; }
me $$
setsid sh -c 'trap "" TERM; exec sleep 1000' & me $!
sh -c '(trap "" TERM; exec sleep 1000) & echo $! > "$1"' - "$dir/daemon-$$"
me "$(cat "$dir/daemon-$$")"
echo "$SNIP_JOBS_INSTANCE $SNIP_JOBS_TOKEN" >> "$dir/starts"
trap '' TERM
`

// idle is the watcher's loop when it has nothing else to do.
const idle = "while :; do sleep 1; done\n"

// Script is the watcher's text, with loop (shell, "" for an idle one) after
// its prelude: for a machine Program cannot write to (a container). Its one
// argument is the folder where it keeps its records.
func Script(loop string) []byte {
	if loop == "" {
		loop = idle
	}
	return []byte("#!/bin/sh\n" + prelude + loop)
}

// Program writes the watcher into dir, with loop (shell, "" for an idle
// one) after its prelude, and returns its command: the program and its
// argument (dir, where it keeps its records).
func Program(dir, loop string) ([]string, error) {
	p := filepath.Join(dir, "watcher.sh")
	if err := os.WriteFile(p, Script(loop), 0o755); err != nil {
		return nil, err
	}
	return []string{p, dir}, nil
}

// Watcher is Program with an idle loop, failing t on error.
func Watcher(t testing.TB, dir string) []string {
	t.Helper()
	cmd, err := Program(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	return cmd
}

// Start is one start of the watcher: where, with which token.
type Start struct{ Instance, Token string }

// Starts lists the watcher's starts in dir, oldest first.
func Starts(t testing.TB, dir string) []Start {
	t.Helper()
	ls, err := lines(filepath.Join(dir, "starts"))
	if err != nil {
		t.Fatal(err)
	}
	var out []Start
	for _, l := range ls {
		in, tok, _ := strings.Cut(l, " ")
		out = append(out, Start{in, tok})
	}
	return out
}

// Overlaps lists the processes of earlier runs a start found alive
// ("<pid> <tree file> <state>"): none, if no program outlived its term.
func Overlaps(dir string) ([]string, error) { return lines(filepath.Join(dir, "overlaps")) }

// Proc is one process of a run's tree as the watcher records it: its pid
// and its start time (clock ticks since boot, /proc/<pid>/stat's 22nd
// field), which tells it from a later process given the same pid.
type Proc struct{ PID, Start string }

// Tree reads the record of a run's tree (the text of a tree-<pid> file).
func Tree(text string) []Proc {
	var out []Proc
	for l := range strings.Lines(text) {
		if pid, start, ok := strings.Cut(strings.TrimSpace(l), " "); ok {
			out = append(out, Proc{pid, start})
		}
	}
	return out
}

// AddTree records in dir, as name, the tree of a run the watchers of dir did
// not start: one in another PID namespace (a container's), its pids
// translated to this one's. The next start of a watcher of dir checks it
// as it checks its own runs' trees (whole: the file is renamed into place).
func AddTree(dir, name string, procs []Proc) error {
	var b strings.Builder
	for _, p := range procs {
		b.WriteString(p.PID + " " + p.Start + "\n")
	}
	tmp := filepath.Join(dir, ".tree-"+name)
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, "tree-"+name))
}

// Alive lists the processes of every run recorded in dir that are alive now.
func Alive(dir string) ([]string, error) {
	trees, err := filepath.Glob(filepath.Join(dir, "tree-*"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range trees {
		ls, err := lines(f)
		if err != nil {
			return nil, err
		}
		for _, p := range Tree(strings.Join(ls, "\n")) {
			if p.Running() {
				out = append(out, p.PID)
			}
		}
	}
	return out, nil
}

// Running reports whether p is alive in this PID namespace: a process with
// its pid that started at its start time, and is no zombie (killed, not yet
// reaped: it runs nothing).
func (p Proc) Running() bool {
	b, err := os.ReadFile("/proc/" + p.PID + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return false
	}
	f := strings.Fields(s[i+1:])
	return len(f) > 19 && f[19] == p.Start && f[0] != "Z"
}

func lines(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) || len(b) == 0 {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return strings.Split(strings.TrimRight(string(b), "\n"), "\n"), nil
}
