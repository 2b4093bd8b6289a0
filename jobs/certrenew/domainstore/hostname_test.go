package domainstore_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/snip/snip-jobs/jobs/certrenew/domainstore"
)

func TestNormalizeDomainAcceptsHostNamesInTheirASCIIForm(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"shop.example.com":                   "shop.example.com",
		"Shop.Example.COM":                   "shop.example.com",
		"bücher.example":                     "xn--bcher-kva.example",
		"Bücher.Example":                     "xn--bcher-kva.example",
		"ＥＸＡＭＰＬＥ.com":                        "example.com", // full-width forms, as a browser maps them
		"faß.de":                             "xn--fa-hia.de",
		"xn--bcher-kva.example":              "xn--bcher-kva.example",
		"münchen.bücher.example":             "xn--mnchen-3ya.xn--bcher-kva.example",
		"a-b.c-d.example":                    "a-b.c-d.example",
		"123.example":                        "123.example",
		"1.2.3.4.example":                    "1.2.3.4.example", // numbers are fine as labels, except the last
		"0x7f.example":                       "0x7f.example",
		"shop.example.0xg":                   "shop.example.0xg", // g is no hex digit: not a number
		"XN--BCHER-KVA.EXAMPLE":              "xn--bcher-kva.example",
		"shop。example．com":                   "shop.example.com", // full stops IDNA maps to dots
		"abc--d.example":                     "abc--d.example",   // "--" as 4th and 5th characters
		strings.Repeat("a", 63) + ".example": strings.Repeat("a", 63) + ".example",
		strings.Repeat(strings.Repeat("a", 62)+".", 4)[:253-4] + ".com": strings.Repeat(strings.Repeat("a", 62)+".", 4)[:253-4] + ".com",
	} {
		got, err := domainstore.NormalizeDomain(raw)
		if err != nil || got != want {
			t.Errorf("NormalizeDomain(%.30q) = %q, %v; want %q", raw, got, err, want)
		}
	}
}

// Public CAs issue only under a top-level domain in the ICANN section of the
// Public Suffix List; a private suffix ("github.io") sits under one (".io").
func TestCheckPublicTLDAcceptsOnlyICANNTopLevelDomains(t *testing.T) {
	t.Parallel()
	for name, public := range map[string]bool{
		"shop.example.com":      true,
		"links.shop.co.uk":      true,
		"user.github.io":        true,
		"github.io":             true,
		"xn--80aswg.xn--p1ai":   true, // сайт.рф
		"a.b.c.d.e.f.g.h.i.com": true,
		"shop.customer.test":    false,
		"printer.local":         false,
		"nas.home.arpa":         true, // .arpa is an ICANN TLD; its names fail at the CA, not here
		"intranet.corp":         false,
		"svc.internal":          false,
		"shop.example.comm":     false,
		"shop.example":          false,
		"shop.localhost":        false,
	} {
		err := domainstore.CheckPublicTLD(name, name)
		var ie *domainstore.InvalidNameError
		switch {
		case public && err != nil:
			t.Errorf("CheckPublicTLD(%q) = %v; want nil", name, err)
		case !public && (!errors.As(err, &ie) || ie.Code != domainstore.InvalidNotPublic || ie.Domain != name):
			t.Errorf("CheckPublicTLD(%q) = %#v; want an InvalidNameError with code %s", name, err, domainstore.InvalidNotPublic)
		}
	}
}

func TestNormalizeDomainRefusesWithAReason(t *testing.T) {
	t.Parallel()
	for raw, code := range map[string]string{
		"":                                       domainstore.InvalidEmpty,
		"my shop.example.com":                    domainstore.InvalidWhitespace,
		" shop.example.com":                      domainstore.InvalidWhitespace,
		"shop.example.com\n":                     domainstore.InvalidWhitespace,
		"shop\x00.example.com":                   domainstore.InvalidControl,
		"*.example.com":                          domainstore.InvalidWildcard,
		"shop.*.example.com":                     domainstore.InvalidWildcard,
		"shop.example.com.":                      domainstore.InvalidTrailingDot,
		"example.com。":                           domainstore.InvalidTrailingDot, // U+3002, a dot once IDNA maps it
		"shop.example.com．":                      domainstore.InvalidTrailingDot, // U+FF0E
		"shop.example.com｡":                      domainstore.InvalidTrailingDot, // U+FF61
		"。example.com":                           domainstore.InvalidEmptyLabel,
		"192.0.2.1":                              domainstore.InvalidIPAddress,
		"2001:db8::1":                            domainstore.InvalidIPAddress,
		"[2001:db8::1]":                          domainstore.InvalidIPAddress,
		"10.0.0.300":                             domainstore.InvalidIPAddress, // numeric last label
		"192.0.2.1:443":                          domainstore.InvalidIPAddress, // with a port
		"[2001:db8::1]:443":                      domainstore.InvalidIPAddress,
		"0x7f.0x0.0x0.0x1":                       domainstore.InvalidIPAddress,    // the last label a number (WHATWG "ends in a number"): 127.0.0.1 to a browser
		"1.0x7f":                                 domainstore.InvalidIPAddress,    // 1.0.0.127
		"co.uk":                                  domainstore.InvalidPublicSuffix, // a registry's, in the PSL's ICANN section
		"Com.AU":                                 domainstore.InvalidPublicSuffix,
		"a.b.c.d.e.f.g.h.i.example.com":          domainstore.InvalidTooManyLabels, // 11; Let's Encrypt's limit is 10
		"a.0X1F":                                 domainstore.InvalidIPAddress,     // not an address: the browser refuses the URL
		"shop.example.0x":                        domainstore.InvalidIPAddress,     // 0x alone is 0
		"shop.example.017":                       domainstore.InvalidIPAddress,     // octal
		"shop.example.09":                        domainstore.InvalidIPAddress,     // a number, though no octal one
		"shop.example.０ｘ１Ｆ":                      domainstore.InvalidIPAddress,     // full-width, mapped to 0x1f
		"123":                                    domainstore.InvalidIPAddress,     // one label, still an address: 0.0.0.123
		"0x7f000001":                             domainstore.InvalidIPAddress,     // 127.0.0.1
		strings.Repeat("a", 64) + ".example":     domainstore.InvalidLabelTooLong,
		strings.Repeat("abcdefghi.", 26) + "com": domainstore.InvalidTooLong, // 263 characters
		strings.Repeat("x", 5000):                domainstore.InvalidTooLong,
		"shop..example.com":                      domainstore.InvalidEmptyLabel,
		".example.com":                           domainstore.InvalidEmptyLabel,
		"-shop.example.com":                      domainstore.InvalidHyphen,
		"shop-.example.com":                      domainstore.InvalidHyphen,
		"ｓｈｏｐ-.example.com":                      domainstore.InvalidHyphen, // full-width letters
		"xn--.example":                           domainstore.InvalidHyphen,
		"ab--cd.example":                         domainstore.InvalidReservedLabel, // "--" as 3rd and 4th characters is only for xn-- (RFC 5890 "R-LDH")
		"r3---sn-abc.example.com":                domainstore.InvalidReservedLabel,
		"ａｂ--ｃｄ.example":                         domainstore.InvalidReservedLabel,
		"ab--cd.bücher.example":                  domainstore.InvalidReservedLabel,
		"ab--cd.xn--bcher-kva.example":           domainstore.InvalidReservedLabel,
		"shop_1.example.com":                     domainstore.InvalidCharacter,
		"shop.example.com:443":                   domainstore.InvalidCharacter,
		"shop%2eexample.com":                     domainstore.InvalidCharacter, // percent-encoding is not decoded
		"_acme-challenge.example.com":            domainstore.InvalidCharacter,
		"user@shop.example.com":                  domainstore.InvalidCharacter,
		"localhost":                              domainstore.InvalidSingleLabel,
		"☃.example":                              domainstore.InvalidIDN,
		"😀.example":                              domainstore.InvalidIDN,
		"xn--n3h.example":                        domainstore.InvalidIDN, // ☃ written in ASCII
		"xn--zz.example":                         domainstore.InvalidIDN,
		"xn--a.example":                          domainstore.InvalidIDN, // punycode of U+0080, a control
		"xn--ab--cd.example":                     domainstore.InvalidIDN, // not valid punycode of a valid label
		"-bücher.example":                        domainstore.InvalidIDN, // xn---bcher-4ya: the Unicode label starts with a hyphen
		"a\u200db.example":                       domainstore.InvalidIDN, // zero-width joiner out of context
		"\xff.example":                           domainstore.InvalidCharacter,
	} {
		got, err := domainstore.NormalizeDomain(raw)
		var ie *domainstore.InvalidNameError
		if !errors.As(err, &ie) {
			t.Errorf("NormalizeDomain(%.30q) = %q, %v; want an *InvalidNameError %q", raw, got, err, code)
			continue
		}
		if ie.Code != code || ie.Domain != raw || ie.Reason == "" {
			t.Errorf("NormalizeDomain(%.30q): %+v; want code %q", raw, ie, code)
		}
	}
}
