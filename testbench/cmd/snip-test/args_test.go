package main

import (
	"slices"
	"testing"
)

// go test's flags keep their values, whether written "-p 4" or "-p=4";
// what is left are the package patterns; -args and what follows pass through.
func TestTheCommandLineIsSplitAsGoTestReadsIt(t *testing.T) {
	a := splitArgs([]string{"-count=1", "-p", "4", "-run", "TestX", "-v", "./leadership/...", "-tags", "x", "./fencing", "-args", "-foo", "bar"})
	if want := []string{"-count=1", "-p", "4", "-run", "TestX", "-v", "-tags", "x"}; !slices.Equal(a.flags, want) {
		t.Errorf("flags %q, want %q", a.flags, want)
	}
	if want := []string{"./leadership/...", "./fencing"}; !slices.Equal(a.pkgs, want) {
		t.Errorf("packages %q, want %q", a.pkgs, want)
	}
	if want := []string{"-args", "-foo", "bar"}; !slices.Equal(a.rest, want) {
		t.Errorf("rest %q, want %q", a.rest, want)
	}
	if !a.has("p") || !a.has("v") || a.has("race") || a.has("4") {
		t.Errorf("has: p %v, v %v, race %v, 4 %v", a.has("p"), a.has("v"), a.has("race"), a.has("4"))
	}
}

// Only the flags that change how packages compile reach the early compile.
func TestTheEarlyCompileGetsOnlyTheCompilersFlags(t *testing.T) {
	a := splitArgs([]string{"-count", "1", "-race", "-run=TestX", "-tags", "integration", "-gcflags=all=-N", "-timeout", "20m"})
	if got, want := a.buildFlags(), []string{"-race", "-tags", "integration", "-gcflags=all=-N"}; !slices.Equal(got, want) {
		t.Errorf("build flags %q, want %q", got, want)
	}
	if got := splitArgs([]string{"-vet", "off", "./x"}).pick("vet"); !slices.Equal(got, []string{"-vet", "off"}) {
		t.Errorf("pick(vet) = %q, want -vet off", got)
	}
}

// snip-test adds -p and a timeout long enough for a busy machine, each
// unless given.
func TestTheDefaultsYieldToTheFlagsGiven(t *testing.T) {
	if got, want := splitArgs(nil).defaults(), []string{parallel, timeout}; !slices.Equal(got, want) {
		t.Errorf("defaults with no flags %q, want %q", got, want)
	}
	if got := splitArgs([]string{"-p", "1", "-timeout=5m", "./x"}).defaults(); len(got) != 0 {
		t.Errorf("defaults with -p and -timeout given: %q, want none", got)
	}
}
