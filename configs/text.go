package configs

import (
	"bytes"
	"fmt"
	"unicode/utf8"
)

// Limits on what Parse reads, so that a hostile or broken file costs a bounded
// amount of memory and time. The figures are documented in
// snip-jobs.example.yaml; a real config is a few kilobytes and a few hundred
// nodes.
const (
	// MaxFileSize is the largest config file Parse accepts, in bytes.
	MaxFileSize = 1 << 20
	// MaxAliasNodes bounds the YAML nodes that aliases and merge keys (<<)
	// may produce in one file, counted as they are expanded: a chain of
	// anchors each listing the previous one ten times (a "billion laughs")
	// is refused at the alias that crosses it instead of being expanded.
	MaxAliasNodes = 10_000
	// MaxDepth bounds how deep lists and mappings may nest (a real config
	// nests about 5 deep), and MaxNodes the YAML nodes the file may hold as
	// written (the scanner's tokens: keys, values, comments, list entries and
	// brackets each count; a real config has a few hundred). Both are
	// measured before the YAML library's parser reads the file (checkGuard),
	// whose cost grows with the square of the depth: 20,000 levels of "[" in
	// 40 KB ran it out of memory.
	MaxDepth = 64
	MaxNodes = 10_000
	// MaxWords bounds the words and YAML indicators (comments' words too)
	// before the library's scanner makes its tokens, two at most of each:
	// a file of 1 MiB of comment lines would cost it 180 MB.
	MaxWords = 4 * MaxNodes
	// MaxKeyPath bounds how long the keys leading to a value may be
	// together, in characters: the YAML library writes them into the path
	// it gives every node below, so that a long key over many values cost
	// their product (a 500 KB key over 10,000 values would be 5 GB).
	MaxKeyPath = 1024
	// MaxScanSteps bounds the steps the YAML library's scanner may take
	// beyond one a character: it reads a run of "<" again at each of its
	// characters, and the rest of the line at each tab in double-quoted
	// text, which costs the square of their length (a file of "<" would take
	// minutes). 16 million steps are about 16 ms.
	MaxScanSteps = 16_000_000
)

var (
	utf8BOM    = []byte{0xef, 0xbb, 0xbf}
	utf16BOMBE = []byte{0xfe, 0xff}
	utf16BOMLE = []byte{0xff, 0xfe}
)

// checkText returns the file's text without a leading UTF-8 byte order mark
// (which editors on Windows write and YAML allows), or a problem saying where
// the file stops being acceptable text: past MaxFileSize, not UTF-8.
func checkText(file string, data []byte) ([]byte, *Error) {
	if bytes.HasPrefix(data, utf16BOMBE) || bytes.HasPrefix(data, utf16BOMLE) {
		return nil, &Error{Pos: Pos{File: file, Line: 1, Col: 1},
			Msg: "the file is UTF-16 (it starts with a UTF-16 byte order mark): save it as UTF-8"}
	}
	data = bytes.TrimPrefix(data, utf8BOM)
	if len(data) > MaxFileSize {
		return nil, &Error{Pos: offsetPos(file, data, MaxFileSize),
			Msg: fmt.Sprintf("the file is longer than %d bytes (1 MiB), the limit for a config file; it ends here at the latest", MaxFileSize)}
	}
	if i := invalidUTF8(data); i >= 0 {
		return nil, &Error{Pos: offsetPos(file, data, i),
			Msg: fmt.Sprintf("the file is not UTF-8: byte 0x%02x here does not start a UTF-8 character (save the file as UTF-8)", data[i])}
	}
	return data, nil
}

// invalidUTF8 returns the offset of the first byte of data that is not part of
// a valid UTF-8 encoding, or -1.
func invalidUTF8(data []byte) int {
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && size <= 1 {
			return i
		}
		i += size
	}
	return -1
}

// offsetPos is the line and column (in characters, as the YAML library counts
// them) of byte offset off of data.
func offsetPos(file string, data []byte, off int) Pos {
	line := 1 + bytes.Count(data[:off], []byte{'\n'})
	start := bytes.LastIndexByte(data[:off], '\n') + 1
	return Pos{File: file, Line: line, Col: 1 + utf8.RuneCount(data[start:off])}
}
