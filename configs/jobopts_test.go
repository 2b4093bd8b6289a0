package configs_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/snip/snip-jobs/configs"
)

type codeOptions struct {
	Every    time.Duration `yaml:"every"`
	Fraction float64       `yaml:"fraction"`
	Whole    float64       `yaml:"whole"`
	Count    int           `yaml:"count"`
	Names    []string      `yaml:"names"`
	On       bool          `yaml:"on"`
}

// Options written in code (tests, tools) decode to the value they were
// written from, whatever the defaults: the whole value is written.
func TestOptionsWrittenInCodeDecodeToTheValueTheyWereWrittenFrom(t *testing.T) {
	defaults := func() codeOptions { return codeOptions{Every: time.Hour, Count: 7, Names: []string{"x"}, On: true} }
	for _, want := range []codeOptions{
		{Every: 90 * time.Second, Fraction: 0.75, Whole: 1, Count: 3, Names: []string{"a", "b"}, On: true},
		{Names: []string{}}, // (a nil list is written as [], and reads back empty)
	} {
		o, err := configs.EncodeOptions(want)
		if err != nil {
			t.Fatal(err)
		}
		got, err := configs.DecodeOptions(configs.Job{Name: "j", Options: o}, defaults)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("written from %+v, decoded %+v (%v)", want, got, err)
		}
	}
}

// A job without options gets the defaults, checked by Validate: an error
// names the job even without a position.
func TestAJobWithoutOptionsGetsTheDefaultsChecked(t *testing.T) {
	got, err := configs.DecodeOptions(configs.Job{Name: "certs"}, newCertOptions)
	if !reflect.DeepEqual(got, certOptions{}) {
		t.Errorf("decoded %+v, want the defaults", got)
	}
	if err == nil || err.Error() != `job "certs": options: at least one domain is required`+"\n"+`job "certs": options: email is required` {
		t.Errorf("error %q, want both problems of Validate, naming the job", err)
	}
}

// Where a job runs is derived in one place.
func TestAJobsModeFollowsSingletonAndCoordination(t *testing.T) {
	for _, c := range []struct {
		singleton bool
		sched     configs.Schedule
		want      configs.Mode
	}{
		{false, configs.Schedule{Kind: configs.Continuous}, configs.ModeEverywhere},
		{false, configs.Schedule{Kind: configs.Cron, Coordination: configs.Database}, configs.ModeEverywhere},
		{true, configs.Schedule{Kind: configs.Interval}, configs.ModeLeader},
		{true, configs.Schedule{Kind: configs.Cron}, configs.ModeLeader},
		{true, configs.Schedule{Kind: configs.Cron, Coordination: configs.Database}, configs.ModeDatabase},
	} {
		j := configs.Job{Singleton: c.singleton, Schedule: c.sched}
		if got := j.Mode(); got != c.want {
			t.Errorf("singleton %v, %v/%v: mode %v, want %v", c.singleton, c.sched.Kind, c.sched.Coordination, got, c.want)
		}
	}
	for m, name := range map[configs.Mode]string{configs.ModeEverywhere: "everywhere", configs.ModeLeader: "leader", configs.ModeDatabase: "database"} {
		if m.String() != name {
			t.Errorf("%d.String() = %q, want %q", int(m), m.String(), name)
		}
	}
}
