package certrenew

import (
	"fmt"
	"net/netip"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

// Reasons a custom domain cannot get a certificate (InvalidNameError.Code).
const (
	InvalidEmpty        = "empty"
	InvalidWhitespace   = "whitespace"
	InvalidControl      = "control_character"
	InvalidWildcard     = "wildcard"
	InvalidTrailingDot  = "trailing_dot"
	InvalidIPAddress    = "ip_address"
	InvalidTooLong      = "too_long"
	InvalidLabelTooLong = "label_too_long"
	InvalidEmptyLabel   = "empty_label"
	InvalidCharacter    = "bad_character"
	InvalidHyphen       = "hyphen"
	InvalidSingleLabel  = "single_label"
	InvalidIDN          = "idn"
)

// Limits of DNS names (RFC 1035 §2.3.4, in the dotted text form).
const (
	maxNameLength  = 253
	maxLabelLength = 63
)

// InvalidNameError says why a custom domain cannot get a certificate.
type InvalidNameError struct {
	Domain string // as written in custom_domains
	Code   string // one of the Invalid* constants
	Reason string // for people
}

func (e *InvalidNameError) Error() string {
	return fmt.Sprintf("certrenew: domain %q cannot get a certificate: %s", e.Domain, e.Reason)
}

// idnaProfile converts internationalised names the way a browser looks them
// up (UTS #46 mapping: case folded, full-width forms narrowed), with the
// IDNA2008 rules for labels and bidi text. Lengths are checked by
// NormalizeDomain itself, to name the limit that was broken.
var idnaProfile = idna.New(
	idna.MapForLookup(),
	idna.BidiRule(),
	idna.ValidateLabels(true),
	idna.StrictDomainName(true),
	idna.Transitional(false),
)

// NormalizeDomain returns the name a certificate is issued for: lower case
// ASCII, internationalised labels in their xn-- form. Anything else is refused
// with an *InvalidNameError: white space, control characters, wildcards (they
// need DNS-01), a trailing dot, IP literals, more than 253 characters, labels
// over 63 or empty, characters other than letters, digits and inner hyphens,
// single-label names, and internationalised names IDNA2008 refuses (emoji,
// mixed scripts the bidi rule forbids, invalid xn-- labels).
func NormalizeDomain(raw string) (string, error) {
	bad := func(code, format string, args ...any) (string, error) {
		return "", &InvalidNameError{Domain: raw, Code: code, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case raw == "":
		return bad(InvalidEmpty, "empty name")
	case len(raw) > 4*maxNameLength:
		return bad(InvalidTooLong, "%d bytes; a DNS name has at most %d characters", len(raw), maxNameLength)
	case !utf8.ValidString(raw):
		return bad(InvalidCharacter, "not valid UTF-8")
	case strings.ContainsFunc(raw, unicode.IsSpace):
		return bad(InvalidWhitespace, "contains white space")
	case strings.ContainsFunc(raw, unicode.IsControl):
		return bad(InvalidControl, "contains a control character")
	case strings.Contains(raw, "*"):
		return bad(InvalidWildcard, "wildcard names need a DNS-01 challenge, which the renewer does not do")
	case strings.HasSuffix(raw, "."):
		return bad(InvalidTrailingDot, "ends with a dot; store the name without it")
	}
	if ip, ok := ipLiteral(raw); ok {
		return bad(InvalidIPAddress, "%s is an IP address, not a host name", ip)
	}

	name := raw
	if !isASCII(raw) {
		a, err := idnaProfile.ToASCII(raw)
		if err != nil {
			return bad(InvalidIDN, "internationalised name cannot be converted to ASCII (IDNA2008/UTS #46): %v", err)
		}
		if r, ok := notIDNA2008(a); !ok {
			return bad(InvalidIDN, "internationalised name has %q (%U): IDNA2008 allows letters, marks and digits only, not symbols or emoji", r, r)
		}
		name = a
	} else {
		name = strings.ToLower(raw)
	}

	if len(name) > maxNameLength {
		return bad(InvalidTooLong, "%d characters (in ASCII form); a DNS name has at most %d", len(name), maxNameLength)
	}
	labels := strings.Split(name, ".")
	for _, l := range labels {
		switch {
		case l == "":
			return bad(InvalidEmptyLabel, "has an empty label (two dots in a row, or a leading dot)")
		case len(l) > maxLabelLength:
			return bad(InvalidLabelTooLong, "label %.20q... has %d characters; a label has at most %d", l, len(l), maxLabelLength)
		case strings.HasPrefix(l, "-") || strings.HasSuffix(l, "-"):
			return bad(InvalidHyphen, "label %q starts or ends with a hyphen", l)
		}
		for _, c := range l {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return bad(InvalidCharacter, "label %q has %q; only letters, digits and hyphens are allowed", l, c)
			}
		}
	}
	if len(labels) < 2 {
		return bad(InvalidSingleLabel, "a single label; public certificates need a registered domain")
	}
	if last := labels[len(labels)-1]; strings.Trim(last, "0123456789") == "" {
		return bad(InvalidIPAddress, "the last label %q is numeric: an IPv4 address or part of one", last)
	}
	// ASCII input with xn-- labels: they must be valid punycode of a valid
	// label, or the CA refuses the order.
	if strings.Contains(name, "xn--") {
		if _, err := idnaProfile.ToUnicode(name); err != nil {
			return bad(InvalidIDN, "has an invalid xn-- label: %v", err)
		}
		if r, ok := notIDNA2008(name); !ok {
			return bad(InvalidIDN, "has an xn-- label for %q (%U): IDNA2008 allows letters, marks and digits only", r, r)
		}
		if a, err := idnaProfile.ToASCII(name); err != nil || a != name {
			return bad(InvalidIDN, "has an xn-- label that is not in its canonical form")
		}
	}
	return name, nil
}

// notIDNA2008 checks the Unicode form of an ASCII name against the core rule
// of IDNA2008 (RFC 5892 "LetterDigits"): letters, combining marks and
// decimal digits, plus the hyphen. x/net/idna follows UTS #46, which still
// lets symbols through (☃.net); CAs following IDNA2008 refuse them.
func notIDNA2008(ascii string) (rune, bool) {
	u, err := idnaProfile.ToUnicode(ascii)
	if err != nil {
		return utf8.RuneError, false
	}
	for _, r := range u {
		switch {
		case r < utf8.RuneSelf, unicode.IsLetter(r), unicode.Is(unicode.Mn, r), unicode.Is(unicode.Mc, r), unicode.Is(unicode.Nd, r):
		default:
			return r, false
		}
	}
	return 0, true
}

// ipLiteral reports whether s is an IPv4 or IPv6 address, bracketed or not.
func ipLiteral(s string) (string, bool) {
	t := strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	if a, err := netip.ParseAddr(t); err == nil {
		return a.String(), true
	}
	return "", false
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}
