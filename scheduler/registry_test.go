package scheduler_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/scheduler"
)

// A type's declared modes are checked before its New, in one message per
// kind of refusal; a type without Modes takes any.
func TestBuildRefusesAJobInAModeItsTypeDoesNotDeclare(t *testing.T) {
	t.Parallel()
	built := 0
	newJob := func(scheduler.Env, configs.Job) (scheduler.Job, error) {
		built++
		return scheduler.JobFunc(func(context.Context, *scheduler.Run) error { return nil }), nil
	}
	everywhere := configs.Job{Name: "j", Schedule: configs.Schedule{Kind: configs.Continuous}}
	leader := configs.Job{Name: "j", Singleton: true, Schedule: configs.Schedule{Kind: configs.Cron}}
	database := configs.Job{Name: "j", Singleton: true, Schedule: configs.Schedule{Kind: configs.Cron, Coordination: configs.Database}}
	for _, c := range []struct {
		modes []configs.Mode
		spec  configs.Job
		want  string // "" = built
	}{
		{nil, database, ""},
		{[]configs.Mode{configs.ModeLeader}, leader, ""},
		{[]configs.Mode{configs.ModeLeader}, everywhere, `t "j": must be a singleton: why`},
		{[]configs.Mode{configs.ModeEverywhere}, leader, `t "j": must not be a singleton (set singleton: false): why`},
		{[]configs.Mode{configs.ModeEverywhere, configs.ModeLeader}, database, `t "j": cannot run in database mode: why`},
	} {
		before := built
		typ := scheduler.Type{Name: "t", New: newJob, Modes: c.modes, ModeWhy: "why"}
		_, err := typ.Build(scheduler.Env{}, c.spec)
		switch {
		case c.want == "" && (err != nil || built != before+1):
			t.Errorf("modes %v, a %v job: %v, want it built", c.modes, c.spec.Mode(), err)
		case c.want != "" && (err == nil || err.Error() != c.want || built != before):
			t.Errorf("modes %v, a %v job: %v (New called: %v), want %q before New", c.modes, c.spec.Mode(), err, built != before, c.want)
		}
	}
}

// The sockets a service manager may pass are those the types declare.
func TestTheRegistryListsTheSocketsItsTypesDeclare(t *testing.T) {
	t.Parallel()
	serve := func(scheduler.Env, []scheduler.Socket) (func(context.Context), error) {
		return func(context.Context) {}, nil
	}
	newJob := func(scheduler.Env, configs.Job) (scheduler.Job, error) { return nil, nil }
	r, err := scheduler.NewRegistry(
		scheduler.Type{Name: "a", New: newJob, Listeners: []scheduler.Listener{{Name: "x", Socket: "web", Serve: serve}}},
		scheduler.Type{Name: "b", New: newJob, Listeners: []scheduler.Listener{{Name: "y", Socket: "dns", Serve: serve}, {Name: "z", Socket: "web", Serve: serve}}},
		scheduler.Type{Name: "c", New: newJob},
	)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Sockets(); !slices.Equal(got, []string{"dns", "web"}) {
		t.Errorf("Sockets() = %v, want [dns web]", got)
	}
	_, err = scheduler.NewRegistry(scheduler.Type{Name: "d", New: newJob, Listeners: []scheduler.Listener{{Name: "nowhere", Serve: serve}}})
	if err == nil || !strings.Contains(err.Error(), `listener "nowhere" needs Serve, and Addr or Socket`) {
		t.Errorf("a listener without an address or a socket: %v", err)
	}
}
