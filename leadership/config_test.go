package leadership

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	c, err := Config{Instance: "a"}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.TTL != 10*time.Second || c.Margin != 3*time.Second || c.RenewInterval != 10*time.Second/3 || c.Host == "" || c.Logger == nil {
		t.Fatalf("defaults: TTL %v margin %v renew %v host %q", c.TTL, c.Margin, c.RenewInterval, c.Host)
	}
}

func TestConfigRejectsWithAPlainMessage(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no instance", Config{}, "Instance is required"},
		{"slash in instance", Config{Instance: "a/b"}, `instance name "a/b"`},
		{"ttl too short", Config{Instance: "a", TTL: time.Second}, "below etcd's minimum"},
		{"ttl fraction", Config{Instance: "a", TTL: 2500 * time.Millisecond}, "whole number of seconds"},
		{"margin = ttl", Config{Instance: "a", TTL: 5 * time.Second, Margin: 5 * time.Second}, "must be less than the TTL"},
		{"negative margin", Config{Instance: "a", Margin: -time.Second}, "negative"},
		{"renew too slow", Config{Instance: "a", TTL: 10 * time.Second, Margin: 3 * time.Second, RenewInterval: 4 * time.Second},
			"fewer than two keep-alives"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.cfg.WithDefaults()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
			if _, err := NewSession(configOnly(tc.cfg)); err == nil {
				t.Fatal("NewSession accepted the config")
			}
		})
	}
}

func TestConfigReportsEveryProblemAtOnce(t *testing.T) {
	t.Parallel()
	_, err := Config{TTL: time.Second, Margin: -time.Second}.WithDefaults()
	for _, want := range []string{"Instance is required", "below etcd's minimum", "negative"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want it to mention %q", err, want)
		}
	}
}

// With etcd's default election timeout, an election leaves renewals
// unanswered for up to ElectionAllowance. The default renew interval is
// shortened where that makes the election fit before the deadline, and only
// there: at the default TTL, and below 4 s, it stays TTL/3.
func TestDefaultRenewIntervalLeavesRoomForAnEtcdElection(t *testing.T) {
	t.Parallel()
	cases := []struct {
		ttl, wantRenew time.Duration
		ridesOut       bool
	}{
		{2 * time.Second, 2 * time.Second / 3, false}, // no interval fits: TTL − margin is 1.4 s
		{3 * time.Second, time.Second, false},
		{4 * time.Second, 600 * time.Millisecond, true}, // 4 − 1.2 − 2.2
		{5 * time.Second, 1300 * time.Millisecond, true},
		{10 * time.Second, 10 * time.Second / 3, true},
		{30 * time.Second, 10 * time.Second, true},
	}
	for _, tc := range cases {
		ttl, margin, renew := TimingDefaults(tc.ttl, 0, 0)
		if renew != tc.wantRenew {
			t.Errorf("TTL %v: default renew interval %v, want %v", ttl, renew, tc.wantRenew)
		}
		if err := CheckTiming(ttl, margin, renew); err != nil {
			t.Errorf("TTL %v: the defaults are refused: %v", ttl, err)
		}
		if got := RidesOutElections(ttl, margin, renew); got != tc.ridesOut {
			t.Errorf("TTL %v: rides out an election %v, want %v (TTL − margin − renew = %v)", ttl, got, tc.ridesOut, ttl-margin-renew)
		}
	}
	// A margin so wide that the shorter interval would be refused keeps TTL/3:
	// the configuration is refused for its margin, with the usual default named.
	if _, _, renew := TimingDefaults(10*time.Second, 5*time.Second, 0); renew != 10*time.Second/3 {
		t.Errorf("TTL 10s margin 5s: default renew interval %v, want TTL/3", renew)
	}
}

// configOnly is a store that has a config and is never asked anything else.
type configOnly Config

func (c configOnly) Config() Config                                         { return Config(c) }
func (configOnly) CheckJob(string) error                                    { panic("unreachable") }
func (configOnly) Open(context.Context, *Lease) (Held, error)               { panic("unreachable") }
func (configOnly) WatchInstances(context.Context, func([]string))           { panic("unreachable") }
func (configOnly) WatchResignRequests(context.Context, func(string, int64)) { panic("unreachable") }
func (configOnly) ClusterLoad(context.Context) (map[string]int, error)      { panic("unreachable") }
