package leadership

import (
	"context"
	"strings"
	"testing"
	"time"
)

// testRules are a backend's rules as the tests here need them (the real
// ones are each backend's layout.Rules).
var testRules = Rules{Backend: "the test backend", MinTTL: 2 * time.Second, WholeSeconds: true}

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	c, err := Config{Instance: "a", Rules: testRules}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.TTL != 10*time.Second || c.Margin != 3*time.Second || c.RenewInterval != 10*time.Second/3 || c.Host == "" || c.Logger == nil || c.Clock == nil {
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
		{"ttl too short", Config{Instance: "a", TTL: time.Second}, "below the test backend's minimum"},
		{"ttl fraction", Config{Instance: "a", TTL: 2500 * time.Millisecond}, "whole number of seconds"},
		{"margin = ttl", Config{Instance: "a", TTL: 5 * time.Second, Margin: 5 * time.Second}, "must be less than the TTL"},
		{"negative margin", Config{Instance: "a", Margin: -time.Second}, "negative"},
		{"renew too slow", Config{Instance: "a", TTL: 10 * time.Second, Margin: 3 * time.Second, RenewInterval: 4 * time.Second},
			"fewer than two keep-alives"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Rules = testRules
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
	_, err := Config{TTL: time.Second, Margin: -time.Second, Rules: testRules}.WithDefaults()
	for _, want := range []string{"Instance is required", "below the test backend's minimum", "negative"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want it to mention %q", err, want)
		}
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
