package certrenew_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/snip/snip-jobs/jobs/certrenew"
)

func TestNormalizeDomainAcceptsHostNamesInTheirASCIIForm(t *testing.T) {
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
		strings.Repeat("a", 63) + ".example": strings.Repeat("a", 63) + ".example",
		strings.Repeat(strings.Repeat("a", 62)+".", 4)[:253-4] + ".com": strings.Repeat(strings.Repeat("a", 62)+".", 4)[:253-4] + ".com",
	} {
		got, err := certrenew.NormalizeDomain(raw)
		if err != nil || got != want {
			t.Errorf("NormalizeDomain(%.30q) = %q, %v; want %q", raw, got, err, want)
		}
	}
}

func TestNormalizeDomainRefusesWithAReason(t *testing.T) {
	for raw, code := range map[string]string{
		"":                                       certrenew.InvalidEmpty,
		"my shop.example.com":                    certrenew.InvalidWhitespace,
		" shop.example.com":                      certrenew.InvalidWhitespace,
		"shop.example.com\n":                     certrenew.InvalidWhitespace,
		"shop\x00.example.com":                   certrenew.InvalidControl,
		"*.example.com":                          certrenew.InvalidWildcard,
		"shop.*.example.com":                     certrenew.InvalidWildcard,
		"shop.example.com.":                      certrenew.InvalidTrailingDot,
		"192.0.2.1":                              certrenew.InvalidIPAddress,
		"2001:db8::1":                            certrenew.InvalidIPAddress,
		"[2001:db8::1]":                          certrenew.InvalidIPAddress,
		"10.0.0.300":                             certrenew.InvalidIPAddress, // numeric last label
		strings.Repeat("a", 64) + ".example":     certrenew.InvalidLabelTooLong,
		strings.Repeat("abcdefghi.", 26) + "com": certrenew.InvalidTooLong, // 263 characters
		strings.Repeat("x", 5000):                certrenew.InvalidTooLong,
		"shop..example.com":                      certrenew.InvalidEmptyLabel,
		".example.com":                           certrenew.InvalidEmptyLabel,
		"-shop.example.com":                      certrenew.InvalidHyphen,
		"shop-.example.com":                      certrenew.InvalidHyphen,
		"shop_1.example.com":                     certrenew.InvalidCharacter,
		"shop.example.com:443":                   certrenew.InvalidCharacter,
		"user@shop.example.com":                  certrenew.InvalidCharacter,
		"localhost":                              certrenew.InvalidSingleLabel,
		"☃.example":                              certrenew.InvalidIDN,
		"😀.example":                              certrenew.InvalidIDN,
		"xn--n3h.example":                        certrenew.InvalidIDN, // ☃ written in ASCII
		"xn--zz.example":                         certrenew.InvalidIDN,
		"a\u200db.example":                       certrenew.InvalidIDN, // zero-width joiner out of context
		"\xff.example":                           certrenew.InvalidCharacter,
	} {
		got, err := certrenew.NormalizeDomain(raw)
		var ie *certrenew.InvalidNameError
		if !errors.As(err, &ie) {
			t.Errorf("NormalizeDomain(%.30q) = %q, %v; want an *InvalidNameError %q", raw, got, err, code)
			continue
		}
		if ie.Code != code || ie.Domain != raw || ie.Reason == "" {
			t.Errorf("NormalizeDomain(%.30q): %+v; want code %q", raw, ie, code)
		}
	}
}
