package layout

import (
	"fmt"
	"regexp"
	"strings"
)

// Kubernetes' own rules for names and label values, as
// k8s.io/apimachinery/pkg/util/validation words them, without linking it
// (that module brings a dozen packages into every binary that reads a
// config). The test holds these against apimachinery's, case by case and
// under the fuzzer.
const (
	dns1123LabelFmt     = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
	dns1123SubdomainFmt = dns1123LabelFmt + "(\\." + dns1123LabelFmt + ")*"
	labelValueFmt       = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?"

	dns1123LabelMsg     = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character"
	dns1123SubdomainMsg = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
	labelValueMsg       = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
)

var (
	dns1123Label     = regexp.MustCompile("^" + dns1123LabelFmt + "$")
	dns1123Subdomain = regexp.MustCompile("^" + dns1123SubdomainFmt + "$")
	labelValue       = regexp.MustCompile("^" + labelValueFmt + "$")
)

// isDNS1123Label is what is wrong with value as a DNS label (a namespace's
// name), nil when nothing is.
func isDNS1123Label(value string) []string {
	var errs []string
	if len(value) > 63 {
		errs = append(errs, maxLen(63))
	}
	if !dns1123Label.MatchString(value) {
		if dns1123Subdomain.MatchString(value) {
			errs = append(errs, "must not contain dots")
		} else {
			errs = append(errs, regexError(dns1123LabelMsg, dns1123LabelFmt, "my-name", "123-abc"))
		}
	}
	return errs
}

// isDNS1123Subdomain is what is wrong with value as a DNS subdomain (a
// Lease's name).
func isDNS1123Subdomain(value string) []string {
	var errs []string
	if len(value) > 253 {
		errs = append(errs, maxLen(253))
	}
	if !dns1123Subdomain.MatchString(value) {
		errs = append(errs, regexError(dns1123SubdomainMsg, dns1123SubdomainFmt, "example.com"))
	}
	return errs
}

// isValidLabelValue is what is wrong with value as a label's value.
func isValidLabelValue(value string) []string {
	var errs []string
	if len(value) > 63 {
		errs = append(errs, maxLenBytes(63))
	}
	if !labelValue.MatchString(value) {
		errs = append(errs, regexError(labelValueMsg, labelValueFmt, "MyValue", "my_value", "12345"))
	}
	return errs
}

func maxLen(n int) string { return fmt.Sprintf("must be no more than %d characters", n) }

// maxLenBytes is how apimachinery v0.37 words a label value's length
// (validation.IsValidLabelValue is now pkg/api/validate/content's
// IsLabelValue, which counts and says bytes; names still say characters).
func maxLenBytes(n int) string { return fmt.Sprintf("must be no more than %d bytes", n) }

func regexError(msg, format string, examples ...string) string {
	quoted := make([]string, len(examples))
	for i, e := range examples {
		quoted[i] = "'" + e + "', "
	}
	return msg + " (e.g. " + strings.Join(quoted, " or ") + "regex used for validation is '" + format + "')"
}
