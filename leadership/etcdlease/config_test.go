package etcdlease

import (
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/snip/snip-jobs/leadership"
)

func TestConfigDefaultsThePrefix(t *testing.T) {
	t.Parallel()
	st, err := newStore(Config{Client: &clientv3.Client{}, Prefix: "/x//", Config: leadership.Config{Instance: "a"}})
	if err != nil {
		t.Fatal(err)
	}
	if st.cfg.Prefix != "/x" || st.cfg.TTL == 0 {
		t.Fatalf("prefix %q, TTL %v", st.cfg.Prefix, st.cfg.TTL)
	}
	if st, _ := newStore(Config{Client: &clientv3.Client{}, Config: leadership.Config{Instance: "a"}}); st.cfg.Prefix != "/snip-jobs" {
		t.Fatalf("default prefix %q", st.cfg.Prefix)
	}
}

// A config without a client is refused with every other problem at once.
func TestConfigWithoutAClientIsRefused(t *testing.T) {
	t.Parallel()
	_, err := NewSession(Config{Config: leadership.Config{TTL: 1}})
	for _, want := range []string{"Client is required", "Instance is required", "below etcd's minimum"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want it to mention %q", err, want)
		}
	}
}
