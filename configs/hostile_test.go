package configs_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/snip/snip-jobs/configs"
)

// aliasBomb is a job whose options hold a chain of anchors, each a list of ten
// aliases of the one before ("billion laughs"): fully expanded, depth 10 is
// 10^10 nodes. The first anchor is on line 6, anchor i on line 6+i.
func aliasBomb(depth int) []byte {
	var b strings.Builder
	b.WriteString("jobs:\n  - name: bomb\n    type: weeklyreport\n    every: 1h\n    options:\n")
	b.WriteString("      a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n")
	for i := 1; i <= depth; i++ {
		fmt.Fprintf(&b, "      a%d: &a%d [%s]\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*a%d, ", i-1), 10), ", "))
	}
	return []byte(b.String())
}

// mergeBomb is the same chain made of merge keys: each anchor merges the one
// before it ten times, and the job merges the last.
func mergeBomb(depth int) []byte {
	var b strings.Builder
	b.WriteString("x-defaults:\n  - &m0 {grace: 5s}\n")
	for i := 1; i <= depth; i++ {
		fmt.Fprintf(&b, "  - &m%d {<<: [%s]}\n", i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*m%d, ", i-1), 10), ", "))
	}
	fmt.Fprintf(&b, "jobs:\n  - <<: *m%d\n    name: bomb\n    type: weeklyreport\n    every: 1h\n", depth)
	return []byte(b.String())
}

// parseMeasured parses data and returns the problems, the nodes that aliases
// and merge keys produced, and the bytes allocated meanwhile: measures of the
// work done that do not depend on the machine's speed.
func parseMeasured(t *testing.T, data []byte) (configs.Errors, int, uint64) {
	t.Helper()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, nodes, err := configs.ParseCounting("test.yaml", data, fakeTypes{})
	runtime.ReadMemStats(&after)
	var errs configs.Errors
	if !errors.As(err, &errs) {
		t.Fatalf("Parse accepted the file or failed oddly (%v); want problems", err)
	}
	return errs, nodes, after.TotalAlloc - before.TotalAlloc
}

// The bomb: ten anchors deep inside a job's options. It is refused at
// the alias whose expansion crosses the limit, having produced no more than
// the limit's nodes, with far less than 100 MB allocated (it took 18 GB and
// was killed after 309 s before the limit; BENCHMARKS.md has its time now).
func TestATenDeepAliasChainInOptionsIsRefusedAtTheAliasThatCrossesTheLimit(t *testing.T) {
	errs, nodes, allocated := parseMeasured(t, aliasBomb(10))
	// a1 expands to 110 nodes, a2 to 1 110, each *a2 in a3's list to 1 111:
	// the limit is crossed on line 9 (a3), at one of its aliases of a2.
	e := findProblem(errs, 9, "alias *a2 would expand to more than 10000 YAML nodes")
	if e == nil {
		t.Fatalf("no problem at line 9 naming the alias and the limit; got:%s", dump(errs))
	}
	if e.Job != "bomb" || e.Pos.Col < len("      a3: &a3 [") {
		t.Errorf("the problem is %q at column %d, want it in job bomb at an alias of line 9's list", e, e.Pos.Col)
	}
	if nodes > configs.MaxAliasNodes+1 {
		t.Errorf("aliases produced %d nodes, want at most the limit %d (+1, the one that crossed it)", nodes, configs.MaxAliasNodes)
	}
	if allocated > 100<<20 {
		t.Errorf("Parse allocated %d MB, want under 100 MB", allocated>>20)
	}
	t.Logf("%d nodes, %d kB allocated", nodes, allocated>>10)
}

func TestATenDeepChainOfMergeKeysIsRefusedAtTheMerge(t *testing.T) {
	errs, nodes, allocated := parseMeasured(t, mergeBomb(10))
	line := 2 + 10 + 2 // x-defaults, m0, m1…m10, jobs:, then the job's <<: *m10
	e := findProblem(errs, line, "alias *m10 would expand to more than 10000 YAML nodes")
	if e == nil || e.Job != "bomb" {
		t.Fatalf("want the problem at the job's merge key (line %d) in job bomb; got:%s", line, dump(errs))
	}
	// Merged entries are counted a whole mapping at a time: the one that
	// crosses the limit has one entry here.
	if nodes > configs.MaxAliasNodes+1 {
		t.Errorf("merge keys produced %d entries, want at most the limit %d", nodes, configs.MaxAliasNodes)
	}
	if allocated > 100<<20 {
		t.Errorf("Parse allocated %d MB, want under 100 MB", allocated>>20)
	}
}

// Sharing values through anchors stays possible: a config whose aliases
// produce fewer nodes than the limit parses.
func TestAliasesUnderTheLimitAreExpanded(t *testing.T) {
	f := mustParse(t, lines(
		"jobs:",
		"  - name: certs",
		"    type: certrenew",
		"    every: 1h",
		"    options:",
		"      email: &who ops@example.com",
		"      domains: &d [a.example, *who]",
		"  - name: certs-2",
		"    type: certrenew",
		"    every: 1h",
		"    options: {email: *who, domains: *d}",
	))
	if got := decoded(t, f.Jobs[1], newCertOptions).Domains; len(got) != 2 || got[1] != "ops@example.com" {
		t.Errorf("certs-2's domains: %q, want the shared list", got)
	}
}

// A UTF-8 byte order mark (Windows editors write one) is allowed and does not
// shift positions; a UTF-16 file is refused at its start.
func TestAByteOrderMarkIsAcceptedAndUTF16IsRefused(t *testing.T) {
	f := mustParse(t, append([]byte("\ufeff"), lines("instance: server-1", "jobs: []")...))
	if f.Instance != "server-1" {
		t.Errorf("instance %q after a byte order mark, want server-1", f.Instance)
	}
	errs := problems(t, append([]byte("\ufeff"), lines("instance: server-1", "shutdown_timeout: 5")...))
	if e := findProblem(errs, 2, "needs a unit"); e == nil || e.Pos.Col != 19 {
		t.Errorf("a problem after a byte order mark: want it at 2:19; got:%s", dump(errs))
	}
	for _, bom := range []string{"\xfe\xff", "\xff\xfe"} {
		errs := problems(t, append([]byte(bom), "i\x00n\x00"...))
		if len(errs) != 1 || errs[0].Pos.Line != 1 || !strings.Contains(errs[0].Msg, "UTF-16") {
			t.Errorf("a UTF-16 file: want one problem at line 1 saying UTF-16; got:%s", dump(errs))
		}
	}
}

// Text that is not UTF-8 (a Latin-1 é, say) is refused where it is.
func TestTextThatIsNotUTF8IsRefusedWithItsPosition(t *testing.T) {
	errs := problems(t, lines("instance: server-1", "jobs:", "  - name: caf\xe9", "    type: weeklyreport"))
	if len(errs) != 1 || errs[0].Pos.Line != 3 || errs[0].Pos.Col != 14 || !strings.Contains(errs[0].Msg, "not UTF-8: byte 0xe9") {
		t.Errorf("want one problem at 3:14 naming byte 0xe9; got:%s", dump(errs))
	}
	// Columns count characters, as the YAML library's do.
	errs = problems(t, lines("instance: é\xff"))
	if len(errs) != 1 || errs[0].Pos.Col != 12 {
		t.Errorf("want the problem at 1:12 (after the two-byte é); got:%s", dump(errs))
	}
}

// A file over MaxFileSize is refused where it crosses the limit, and Load
// reads no more of it than that.
func TestAFileOverTheSizeLimitIsRefusedWhereItCrossesIt(t *testing.T) {
	line := "# " + strings.Repeat("x", 98) + "\n" // 101 bytes
	big := bytes.Repeat([]byte(line), 2*configs.MaxFileSize/len(line))
	wantLine := configs.MaxFileSize/len(line) + 1
	errs := problems(t, big)
	if len(errs) != 1 || errs[0].Pos.Line != wantLine || !strings.Contains(errs[0].Msg, "longer than 1048576 bytes") {
		t.Errorf("want one problem at line %d naming the limit; got:%s", wantLine, dump(errs))
	}
	path := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(path, big, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := configs.Load(path, fakeTypes{})
	if !errors.As(err, &errs) || len(errs) != 1 || errs[0].Pos.Line != wantLine || errs[0].Pos.File != path {
		t.Errorf("Load of a 2 MiB file: want the same problem at %s:%d; got %v", path, wantLine, err)
	}
	// Exactly at the limit is allowed.
	if _, err := parse(big[:configs.MaxFileSize]); err != nil && strings.Contains(err.Error(), "longer than") {
		t.Errorf("a file of exactly MaxFileSize bytes is refused: %v", err)
	}
}
