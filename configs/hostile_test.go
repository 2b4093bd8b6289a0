package configs_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"testing"
	"time"

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

// childEnv marks the child process of inChild.
const childEnv = "SNIP_CONFIGS_TEST_CHILD"

// childHeapLimit is what the child's heap may hold: the tests that run there
// need a few megabytes; what they guard against takes gigabytes (the YAML
// library reading 20,000 levels of "[" ran a process out of memory, and so
// did reading a 3 GB secret file).
const childHeapLimit = 256 << 20

// inChild runs the calling test (or subtest) again in a child process and
// reports its failures, so that a parse that runs away with memory ends the child and
// fails the test instead of ending the suite: the child stops itself (exit 3)
// once its heap holds more than childHeapLimit. It returns true in the
// child, which then runs the test's body.
func inChild(t *testing.T) bool {
	t.Helper()
	if os.Getenv(childEnv) != "" {
		debug.SetMemoryLimit(childHeapLimit / 2) // collect garbage early: count what is held
		go func() {
			sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
			for {
				metrics.Read(sample)
				if held := sample[0].Value.Uint64(); held > childHeapLimit {
					fmt.Fprintf(os.Stderr, "the heap holds %d MiB, over the test's %d MiB: the code under test builds or reads what it should refuse\n", held>>20, childHeapLimit>>20)
					os.Exit(3)
				}
				time.Sleep(time.Millisecond) // how often to look, not how long to wait
			}
		}()
		return true
	}
	run := strings.Split(t.Name(), "/")
	for i, name := range run {
		run[i] = "^" + regexp.QuoteMeta(name) + "$"
	}
	cmd := exec.Command(os.Args[0], "-test.run="+strings.Join(run, "/"), "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("the test, run in a child process: %v\n%s", err, out)
	}
	return false
}

// A file nested deeper than MaxDepth is refused where it crosses the limit,
// before the YAML library reads it, whatever the nesting is made of: brackets
// in a job's options, flow mappings at the top, "- " in one line, or keys and
// "-" in turn at one column, or "- !tag" lines, which the library nests
// though YAML does not. 20,000 levels of each is a file of 40 to 100 KB.
func TestNestingDeeperThanTheLimitIsRefusedBeforeTheYAMLLibraryReadsIt(t *testing.T) {
	const levels = 20_000
	job := "jobs:\n  - name: deep\n    type: weeklyreport\n    every: 1h\n    options:\n      title: " // lines 1–6
	for _, c := range []struct {
		name      string
		data      string
		line, col int // where the 65th level opens
	}{
		// top, jobs, the job, its options are four levels: the 61st "[".
		{"brackets in options", job + strings.Repeat("[", levels) + strings.Repeat("]", levels) + "\n", 6, len("      title: ") + 61},
		// the top mapping, then the 64th "{".
		{"flow mappings", "a: " + strings.Repeat("{a: ", levels) + "1" + strings.Repeat("}", levels) + "\n", 1, len("a: ") + 63*len("{a: ") + 1},
		// the top mapping, x's list, then the 64th "- ".
		{"block lists on one line", "x:\n" + strings.Repeat("- ", levels) + "1\n", 2, 63*len("- ") + 1},
		// k:, -, k:, -, …: the 33rd k opens the 65th level (at its ":").
		{"keys and lists at one column", strings.Repeat("k:\n-\n", levels/2), 65, 2},
		// a tag takes the next list, wherever it is, as its value.
		{"tagged lists", strings.Repeat("- !t\n", levels) + "- x\n", 65, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			if !inChild(t) {
				return
			}
			_, err := configs.Parse("deep.yaml", []byte(c.data), fakeTypes{})
			var errs configs.Errors
			if !errors.As(err, &errs) || len(errs) != 1 {
				t.Fatalf("want one problem, got %v", err)
			}
			e := errs[0]
			want := fmt.Sprintf("deep.yaml:%d:%d: lists and mappings nest more than 64 deep here, the limit for a config file", c.line, c.col)
			if !strings.HasPrefix(e.Error(), want) || e.Pos.File != "deep.yaml" {
				t.Errorf("got  %s\nwant %s…", e, want)
			}
		})
	}
}

// Up to MaxDepth levels are read as usual (the file's other problems are
// found); one more is refused.
func TestNestingUpToTheLimitIsRead(t *testing.T) {
	nested := func(levels int) []byte { // the top mapping and levels-1 lists
		return []byte("x: " + strings.Repeat("[", levels-1) + strings.Repeat("]", levels-1) + "\n")
	}
	errs := problems(t, nested(configs.MaxDepth))
	if len(errs) != 1 || !strings.Contains(errs[0].Msg, `unknown key "x"`) {
		t.Errorf("%d levels: want only the unknown key; got:%s", configs.MaxDepth, dump(errs))
	}
	errs = problems(t, nested(configs.MaxDepth+1))
	if len(errs) != 1 || errs[0].Pos.Col != len("x: ")+configs.MaxDepth || !strings.Contains(errs[0].Msg, "nest more than 64 deep") {
		t.Errorf("%d levels: want the limit at 1:%d; got:%s", configs.MaxDepth+1, len("x: ")+configs.MaxDepth, dump(errs))
	}
}

// Brackets, "-" and keys inside quoted and block scalars and comments, and
// brackets inside plain scalars, are text, not nesting: a thousand of each
// pass.
func TestBracketsInTextAreNotNesting(t *testing.T) {
	many, plain := strings.Repeat("[{- a: ", 1000), strings.Repeat("[{- ", 1000)
	f := mustParse(t, lines(
		"# "+many,
		"jobs:",
		"  - name: quoted",
		"    type: weeklyreport",
		"    every: 1h",
		`    options: {title: "`+many+`", recipients: ['`+many+`']} # `+many,
		"  - name: block",
		"    type: weeklyreport",
		"    every: 1h",
		"    options:",
		"      title: |",
		"        "+many,
		"        "+many,
		"      recipients:",
		"        - plain "+plain,
		"        - >-",
		"          "+many,
	))
	if got := decoded(t, f.Jobs[1], newReportOptions).Title; got != many+"\n"+many+"\n" {
		t.Errorf("the block scalar reads %q", got)
	}
}

// A file of more than MaxNodes nodes is refused at the node that crosses the
// limit, before the YAML library reads it; a file of fewer is read.
func TestAFileOfMoreNodesThanTheLimitIsRefusedWhereItCrossesIt(t *testing.T) {
	// Each line is two nodes, "-" and "a": node 10,001 is line 5,001's "-".
	errs := problems(t, bytes.Repeat([]byte("- a\n"), configs.MaxNodes))
	if len(errs) != 1 || errs[0].Pos.Line != configs.MaxNodes/2+1 || errs[0].Pos.Col != 1 ||
		!strings.Contains(errs[0].Msg, "more than 10000 YAML nodes by here") {
		t.Errorf("want one problem at %d:1 naming the limit; got:%s", configs.MaxNodes/2+1, dump(errs))
	}
	errs = problems(t, bytes.Repeat([]byte("- a\n"), configs.MaxNodes/2))
	if len(errs) != 1 || !strings.Contains(errs[0].Msg, "must be a mapping") {
		t.Errorf("%d nodes: want only the file's own problem; got:%s", configs.MaxNodes, dump(errs))
	}
	// The library keeps a token of each comment: 1 MiB of them cost 180 MB.
	errs = problems(t, bytes.Repeat([]byte("#\n"), configs.MaxNodes+1))
	if len(errs) != 1 || errs[0].Pos.Line != configs.MaxNodes+1 || !strings.Contains(errs[0].Msg, "more than 10000 YAML nodes by here") {
		t.Errorf("%d comment lines: want one problem at line %d naming the limit; got:%s", configs.MaxNodes+1, configs.MaxNodes+1, dump(errs))
	}
}

// The keys leading to a value may be MaxKeyPath characters long together: the
// YAML library writes them into the path of every value below, so that a
// 500 KB key over 4,500 values (9,000 nodes) cost 2.2 GB. Refused at the key that crosses
// the limit, in a child process whose heap is bounded, which the old code
// crossed.
func TestKeysLongerThanTheLimitTogetherAreRefused(t *testing.T) {
	if !inChild(t) {
		return
	}
	long := strings.Repeat("k", 500_000)
	key60 := strings.Repeat("k", 60)
	var nested strings.Builder
	for i := range 20 { // the 17th key makes the path 1+17×61 = 1038 characters
		fmt.Fprintf(&nested, "%s%s:\n", strings.Repeat("  ", i), key60)
	}
	for _, c := range []struct {
		name, data string
		line, col  int
	}{
		{"one long key", long + ": [" + strings.Repeat("a,", 4_500) + "a]\n", 1, len(long) + 1},
		{"nested keys", nested.String(), 17, 2*16 + len(key60) + 1},
	} {
		_, err := configs.Parse("keys.yaml", []byte(c.data), fakeTypes{})
		var errs configs.Errors
		want := fmt.Sprintf("keys.yaml:%d:%d: the keys leading here, this one included, are more than 1024 characters long together, the limit for a config file", c.line, c.col)
		if !errors.As(err, &errs) || len(errs) != 1 || !strings.HasPrefix(errs[0].Error(), want) {
			t.Errorf("%s: got %v\nwant %s…", c.name, err, want)
		}
	}
	// 16 of them, 977 characters, are read as usual.
	if errs := problems(t, []byte(strings.Join(strings.SplitAfter(nested.String(), "\n")[:16], ""))); len(errs) != 1 || !strings.Contains(errs[0].Msg, "unknown key") {
		t.Errorf("16 nested keys: want only the unknown key; got:%s", dump(errs))
	}
}

// Text that would cost the YAML library's scanner the square of its length is
// refused where it crosses MaxScanSteps, before the library reads it: a run of
// "<" (the library counts the run again at each of its characters) and tabs in
// double-quoted text (it reads the rest of the line at each one). 50,000 of
// either took it over a second; a file of them, minutes.
func TestTextThatCostsTheYAMLLibraryTheSquareOfItsLengthIsRefused(t *testing.T) {
	const n = 50_000
	for _, c := range []struct {
		name, prefix, run, suffix string
		steps                     func(i int) int // what the i-th character of the run costs
	}{
		{"runs of <", "x: ", "<", "\n", func(i int) int { return n - i }},
		{"tabs in double quotes", `x: "`, "\t", "x\"\n", func(i int) int { return n - i + len("x\"") }},
	} {
		data := c.prefix + strings.Repeat(c.run, n) + c.suffix
		at, steps := 0, 0
		for steps <= configs.MaxScanSteps {
			steps += c.steps(at)
			at++
		}
		want := fmt.Sprintf("test.yaml:1:%d: the YAML library would take more than 16000000 steps to read the file by here, the limit for a config file", len(c.prefix)+at)
		errs := problems(t, []byte(data))
		if len(errs) != 1 || !strings.HasPrefix(errs[0].Error(), want) {
			t.Errorf("%s: got:%s\nwant %s…", c.name, dump(errs), want)
		}
	}
}
