package domainstore

import (
	"fmt"
	"net/netip"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/net/idna"
	"golang.org/x/net/publicsuffix"
)

// Reasons a custom domain cannot get a certificate (InvalidNameError.Code).
const (
	InvalidEmpty         = "empty"
	InvalidWhitespace    = "whitespace"
	InvalidControl       = "control_character"
	InvalidWildcard      = "wildcard"
	InvalidTrailingDot   = "trailing_dot"
	InvalidIPAddress     = "ip_address"
	InvalidTooLong       = "too_long"
	InvalidLabelTooLong  = "label_too_long"
	InvalidEmptyLabel    = "empty_label"
	InvalidCharacter     = "bad_character"
	InvalidHyphen        = "hyphen"
	InvalidReservedLabel = "reserved_label"
	InvalidSingleLabel   = "single_label"
	InvalidTooManyLabels = "too_many_labels"
	InvalidPublicSuffix  = "public_suffix"
	InvalidIDN           = "idn"
	InvalidNotPublic     = "not_public" // CheckPublicTLD
)

// Limits of DNS names (RFC 1035 §2.3.4, in the dotted text form), and
// Let's Encrypt's limit on their labels (boulder's policy: 10).
const (
	maxNameLength  = 253
	maxLabelLength = 63
	maxLabels      = 10
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
// up (UTS #46 mapping: case folded, full-width forms narrowed, ideographic
// full stops made dots), with the IDNA2008 rules for labels and bidi text.
// Lengths are checked by NormalizeDomain itself, to name the limit that was
// broken.
var idnaProfile = idna.New(idnaOptions...)

var idnaOptions = []idna.Option{idna.MapForLookup(), idna.BidiRule(), idna.ValidateLabels(true),
	idna.StrictDomainName(true), idna.Transitional(false)}

// idnaMapping is idnaProfile without its hyphen rules, for converting
// internationalised input to ASCII: NormalizeDomain checks the hyphens of
// the ASCII labels itself, to give the reason ("ｓｈｏｐ-.example" has a
// trailing hyphen, "ａｂ--ｃｄ.example" a reserved label). The hyphens of
// the labels in their Unicode form are checked by idnaProfile afterwards,
// with every xn-- label.
var idnaMapping = idna.New(append(idnaOptions, idna.CheckHyphens(false))...)

// NormalizeDomain returns the name a certificate is issued for: lower case
// ASCII, internationalised labels in their xn-- form. Anything else is refused
// with an *InvalidNameError: white space, control characters, wildcards (they
// need DNS-01), a trailing dot (also one IDNA maps to a dot, such as U+3002),
// IP literals (with or without a port) and names whose last label is a number
// (URL parsers read them as IPv4 addresses), more than 253 characters, labels
// over 63 or empty, characters other than letters, digits and inner hyphens,
// labels with "--" as 3rd and 4th characters but not xn--, single-label names,
// names of more than 10 labels (Let's Encrypt's limit), names that are
// themselves a public suffix in the ICANN section of the Public Suffix List
// ("co.uk": it belongs to a registry, not a customer), and internationalised
// names IDNA2008 refuses (emoji, mixed scripts the bidi rule forbids, invalid
// xn-- labels). Whether the name ends in a public top-level domain is
// CheckPublicTLD's question.
func NormalizeDomain(raw string) (string, error) {
	name, r := normalize(raw)
	if r != nil {
		return "", &InvalidNameError{Domain: raw, Code: r.code, Reason: r.reason}
	}
	return name, nil
}

// refusal is why NormalizeDomain refuses a name (the name is added there).
type refusal struct{ code, reason string }

func refuse(code, format string, args ...any) *refusal {
	return &refusal{code: code, reason: fmt.Sprintf(format, args...)}
}

// normalize is NormalizeDomain in its four checks: the text as written, its
// ASCII form, its labels, and its internationalised labels.
func normalize(raw string) (string, *refusal) {
	if r := checkText(raw); r != nil {
		return "", r
	}
	name, r := asciiForm(raw)
	if r != nil {
		return "", r
	}
	if r := checkLabels(name); r != nil {
		return "", r
	}
	return name, checkIDN(raw, name)
}

// checkText refuses what no name may contain as written.
func checkText(raw string) *refusal {
	switch {
	case raw == "":
		return refuse(InvalidEmpty, "empty name")
	case len(raw) > 4*maxNameLength:
		return refuse(InvalidTooLong, "%d bytes; a DNS name has at most %d characters", len(raw), maxNameLength)
	case !utf8.ValidString(raw):
		return refuse(InvalidCharacter, "not valid UTF-8")
	case strings.ContainsFunc(raw, unicode.IsSpace):
		return refuse(InvalidWhitespace, "contains white space")
	case strings.ContainsFunc(raw, unicode.IsControl):
		return refuse(InvalidControl, "contains a control character")
	case strings.Contains(raw, "*"):
		return refuse(InvalidWildcard, "wildcard names need a DNS-01 challenge, which the renewer does not do")
	case strings.HasSuffix(raw, "."):
		return refuse(InvalidTrailingDot, "ends with a dot; store the name without it")
	}
	if ip, ok := ipLiteral(raw); ok {
		return refuse(InvalidIPAddress, "%s is an IP address, not a host name", ip)
	}
	return nil
}

// asciiForm is the name in lower case ASCII, internationalised labels
// converted to their xn-- form.
func asciiForm(raw string) (string, *refusal) {
	if isASCII(raw) {
		return strings.ToLower(raw), nil
	}
	name, err := idnaMapping.ToASCII(raw)
	if err != nil {
		return "", refuse(InvalidIDN, "internationalised name cannot be converted to ASCII (IDNA2008/UTS #46): %v", err)
	}
	if strings.HasSuffix(name, ".") {
		// A full stop IDNA maps to a dot (。 U+3002, ． U+FF0E, ｡ U+FF61).
		return "", refuse(InvalidTrailingDot, "ends with a full stop that is a dot in a host name (%U); store the name without it", lastRune(raw))
	}
	return name, nil
}

// checkLabels checks the ASCII name's length, its labels, and that it is a
// name a customer can hold.
func checkLabels(name string) *refusal {
	if len(name) > maxNameLength {
		return refuse(InvalidTooLong, "%d characters (in ASCII form); a DNS name has at most %d", len(name), maxNameLength)
	}
	labels := strings.Split(name, ".")
	for _, l := range labels {
		if r := checkLabel(l); r != nil {
			return r
		}
	}
	if last := labels[len(labels)-1]; endsInANumber(last) {
		return refuse(InvalidIPAddress, "the last label %q is a number (decimal, octal or 0x hex): browsers read the name as an IPv4 address, or refuse it", last)
	}
	if len(labels) < 2 {
		return refuse(InvalidSingleLabel, "a single label; public certificates need a registered domain")
	}
	if len(labels) > maxLabels {
		return refuse(InvalidTooManyLabels, "%d labels; Let's Encrypt issues for names of at most %d", len(labels), maxLabels)
	}
	if suffix, icann := publicsuffix.PublicSuffix(name); icann && suffix == name {
		return refuse(InvalidPublicSuffix, "%s is a public suffix (a registry's, like co.uk), not a domain a customer can hold", name)
	}
	return nil
}

// checkLabel checks one ASCII label.
func checkLabel(l string) *refusal {
	switch {
	case l == "":
		return refuse(InvalidEmptyLabel, "has an empty label (two dots in a row, or a leading dot)")
	case len(l) > maxLabelLength:
		return refuse(InvalidLabelTooLong, "label %.20q... has %d characters; a label has at most %d", l, len(l), maxLabelLength)
	case strings.HasPrefix(l, "-") || strings.HasSuffix(l, "-"):
		return refuse(InvalidHyphen, "label %q starts or ends with a hyphen", l)
	case len(l) >= 4 && l[2:4] == "--" && !strings.HasPrefix(l, "xn--"):
		// RFC 5890 §2.3.1 reserves these labels ("R-LDH") for
		// encodings like xn--; Let's Encrypt refuses them.
		return refuse(InvalidReservedLabel, "label %q has two hyphens as its 3rd and 4th characters, which only internationalised (xn--) labels may have", l)
	}
	for _, c := range l {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return refuse(InvalidCharacter, "label %q has %q; only letters, digits and hyphens are allowed", l, c)
		}
	}
	return nil
}

// checkIDN checks the xn-- labels, as written or converted from Unicode:
// they must be valid punycode of a valid label (hyphens included: "-bücher"
// is not), or the CA refuses the order.
func checkIDN(raw, name string) *refusal {
	if !strings.Contains(name, "xn--") {
		return nil
	}
	if _, err := idnaProfile.ToUnicode(name); err != nil {
		return refuse(InvalidIDN, "has an internationalised label that IDNA2008 refuses (bad punycode, hyphens or characters): %v", err)
	}
	if r, ok := notIDNA2008(name); !ok {
		if !isASCII(raw) {
			return refuse(InvalidIDN, "internationalised name has %q (%U): IDNA2008 allows letters, marks and digits only, not symbols or emoji", r, r)
		}
		return refuse(InvalidIDN, "has an xn-- label for %q (%U): IDNA2008 allows letters, marks and digits only", r, r)
	}
	if a, err := idnaProfile.ToASCII(name); err != nil || a != name {
		return refuse(InvalidIDN, "has an xn-- label that is not in its canonical form")
	}
	return nil
}

// CheckPublicTLD refuses a name (as NormalizeDomain returns it) whose
// top-level domain is not in the ICANN section of the Public Suffix List, as
// Let's Encrypt does ("Domain name does not end with a valid public suffix"):
// internal names (.local, .internal, .lan), reserved ones (.test, .example,
// .invalid, .localhost) and typos (.comm). The list is the one built into
// golang.org/x/net/publicsuffix: a TLD delegated after that version was
// released is refused until the module is updated (the renewer's
// require_public_tld: false turns the check off).
func CheckPublicTLD(raw, name string) error {
	tld := name[strings.LastIndexByte(name, '.')+1:]
	if _, icann := publicsuffix.PublicSuffix(tld); !icann {
		return &InvalidNameError{Domain: raw, Code: InvalidNotPublic,
			Reason: fmt.Sprintf("the top-level domain %q is not a public one (not in the ICANN section of the Public Suffix List); public CAs refuse it", tld)}
	}
	return nil
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

// endsInANumber is the WHATWG URL standard's "ends in a number checker" for
// the last label of a name (lower case, no trailing dot): all ASCII digits
// (decimal, or octal with a leading zero: "017"; "09" too, which the IPv4
// parser then refuses), or "0x" followed by hexadecimal digits only ("0x"
// alone is 0). A browser's host parser reads such a name as an IPv4 address
// ("1.0x7f" is 1.0.0.127) and refuses it if it is not one ("a.0x1f"); it never
// looks it up in DNS. inet_aton reads the same forms.
func endsInANumber(last string) bool {
	if last == "" {
		return false
	}
	if strings.Trim(last, "0123456789") == "" {
		return true
	}
	hex, ok := strings.CutPrefix(last, "0x")
	return ok && strings.Trim(hex, "0123456789abcdef") == ""
}

// ipLiteral reports whether s is an IPv4 or IPv6 address, bracketed or not,
// with or without a port.
func ipLiteral(s string) (string, bool) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().String(), true
	}
	t := strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	if a, err := netip.ParseAddr(t); err == nil {
		return a.String(), true
	}
	return "", false
}

// lastRune is the last character of s.
func lastRune(s string) rune {
	r, _ := utf8.DecodeLastRuneInString(s)
	return r
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}
