package supervisor

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"
)

// A death reclaim finds the supervisors of a dead instance's runs by the
// instance named in their arguments, and waits until they are gone; another
// instance's supervisors are not its.
func TestTheSupervisorsOfAnInstanceAreFoundAndWaitedFor(t *testing.T) {
	t.Parallel()
	instance := "reclaim-" + t.Name()
	r := start(t, `exec sleep 1000`, func(s *Spec) { s.Instance = instance })
	other := start(t, `exec sleep 1000`, func(s *Spec) { s.Instance = instance + "-other" })
	pids, err := Supervising(instance, os.Getpid())
	if err != nil || len(pids) != 1 {
		t.Fatalf("the supervisors of %s: %v, %v; want the one run's", instance, pids, err)
	}
	if others, _ := Supervising(instance+"-other", os.Getpid()); slices.Contains(others, pids[0]) {
		t.Errorf("%s's supervisor counted as %s-other's", instance, instance)
	}
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := WaitGone(short, instance, os.Getpid()); err == nil {
		t.Errorf("WaitGone returned while %s's supervisor (pid %d) ran", instance, pids[0])
	}
	r.Stop(0)
	if err := WaitGone(t.Context(), instance, os.Getpid()); err != nil {
		t.Fatal(err)
	}
	if left, _ := Supervising(instance, os.Getpid()); len(left) != 0 {
		t.Errorf("supervisors of %s left after WaitGone: %v", instance, left)
	}
	if left, _ := Supervising(instance+"-other", os.Getpid()); len(left) != 1 {
		t.Errorf("the other instance's supervisor: %v; want it still running", left)
	}
	other.Stop(0)
}

// A spare supervisor, started ahead, runs its program when told (the run
// does not wait for a supervisor to start); an unused one exits when closed,
// leaving no supervisor behind.
func TestASpareSupervisorRunsItsProgramLaterAndAnUnusedOneExits(t *testing.T) {
	t.Parallel()
	instance := "spare-" + t.Name()
	sp, err := Prepare(Spec{Instance: instance, Label: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	// Its arguments are in /proc once it runs: read just after its exec, a
	// process's cmdline can still be empty (the kernel sets it up after
	// releasing the parent).
	<-sp.Ready()
	if pids, _ := Supervising(instance, os.Getpid()); len(pids) != 1 {
		t.Fatalf("the spare's supervisor: %v; want it running", pids)
	}
	p, err := sp.Start(t.Context(), Spec{Path: "/bin/sh", Args: []string{"-c", "exit 7"}, Env: programEnv})
	if err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	if res := p.Result(); res.Code != 7 || res.Err != nil {
		t.Errorf("the spare's run: %+v; want exit 7", res)
	}
	unused, err := Prepare(Spec{Instance: instance, Label: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	unused.Close()
	if err := WaitGone(t.Context(), instance, os.Getpid()); err != nil {
		t.Fatal(err)
	}
}
