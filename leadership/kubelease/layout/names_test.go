package layout

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// The rules here are Kubernetes' own, word for word: the same verdict and
// the same messages as apimachinery's validation, on names chosen to hit
// every branch.
var names = []string{
	"", "a", "A", "-", "a-", "-a", "a-b", "a.b", "a..b", ".a", "a.", "a_b", "_a", "A_b.C-d",
	"123", "123-abc", "my-name", "example.com", "Weekly Report", "server/1", "ü", "a\x00b",
	strings.Repeat("a", 63), strings.Repeat("a", 64), strings.Repeat("a.", 126) + "a", strings.Repeat("a", 254),
	strings.Repeat("a-", 40), strings.Repeat("A.", 40),
}

func TestTheNameRulesAreKubernetesOwn(t *testing.T) {
	for _, n := range names {
		same(t, n)
	}
}

func FuzzTheNameRulesAreKubernetesOwn(f *testing.F) {
	for _, n := range names {
		f.Add(n)
	}
	f.Fuzz(same)
}

func same(t *testing.T, n string) {
	for _, c := range []struct {
		what       string
		ours, them func(string) []string
	}{
		{"DNS-1123 label", isDNS1123Label, validation.IsDNS1123Label},
		{"DNS-1123 subdomain", isDNS1123Subdomain, validation.IsDNS1123Subdomain},
		{"label value", isValidLabelValue, validation.IsValidLabelValue},
	} {
		if ours, them := c.ours(n), c.them(n); !slices.Equal(ours, them) {
			t.Errorf("%s %q: ours %q, apimachinery's %q", c.what, n, ours, them)
		}
	}
}
