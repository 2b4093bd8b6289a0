package configs

import "strings"

// tokenKind is what the library's last token in its current scan was, as far
// as the scan needs it.
type tokenKind uint8

const (
	noToken tokenKind = iota
	otherToken
	quotedToken
	mappingValueToken
	stringToken // a block scalar's content
)

// scanContext is the library's Context (scanner/context.go): what the
// scanner has read since its latest token, and its latest token. The library
// starts it afresh after each invalid token.
type scanContext struct {
	buf             []rune
	obuf            []rune
	notSpaceCharPos int
	notSpaceOrgPos  int
	ml              *multiLine
	lastToken       tokenKind
	lastTokenColumn int
}

// reset is the library's newContext.
func (c *scanContext) reset() {
	c.resetBuffer()
	c.ml = nil
	c.lastToken = noToken
}

func (c *scanContext) resetBuffer() {
	c.buf = c.buf[:0]
	c.obuf = c.obuf[:0]
	c.notSpaceCharPos = 0
	c.notSpaceOrgPos = 0
}

func (c *scanContext) clear() {
	c.resetBuffer()
	c.ml = nil
}

func (c *scanContext) addBuf(r rune) {
	if len(c.buf) == 0 && (r == ' ' || r == '\t') {
		return
	}
	c.buf = append(c.buf, r)
	if r != ' ' && r != '\t' {
		c.notSpaceCharPos = len(c.buf)
	}
}

func (c *scanContext) addBufWithTab(r rune) {
	if len(c.buf) == 0 && r == ' ' {
		return
	}
	c.buf = append(c.buf, r)
	if r != ' ' {
		c.notSpaceCharPos = len(c.buf)
	}
}

func (c *scanContext) addOriginBuf(r rune) {
	c.obuf = append(c.obuf, r)
	if r != ' ' && r != '\t' {
		c.notSpaceOrgPos = len(c.obuf)
	}
}

func (c *scanContext) removeRightSpaceFromBuf() {
	if len(c.obuf) > c.notSpaceOrgPos {
		c.obuf = c.obuf[:c.notSpaceOrgPos]
		c.buf = c.bufferedSrc()
	}
}

func (c *scanContext) bufferedSrc() []rune {
	src := c.buf[:c.notSpaceCharPos]
	if c.ml == nil {
		return src
	}
	// Block chomping, as the library does it: only whether anything is left
	// matters here.
	str := string(src)
	m := c.ml
	if m.hasTrimAllEndNewlineOpt() {
		str = strings.TrimRight(str, "\n")
	} else if !m.hasKeepAllEndNewlineOpt() {
		n := len(str) - len(strings.TrimRight(str, "\n"))
		if n > 1 {
			str = str[:len(str)-(n-1)]
		}
	}
	if m.hasTrimAllEndNewlineOpt() {
		str = strings.TrimRight(str, " ")
	}
	if str == "\n" {
		str = ""
	}
	if m.hasKeepAllEndNewlineOpt() && str == "" {
		str = "\n"
	}
	return []rune(str)
}

func (c *scanContext) existsBuffer() bool { return len(c.bufferedSrc()) != 0 }

// obufStartsWithTab: the library refuses a "-" or ":" after an indentation
// that starts with a tab (after at most one space).
func (c *scanContext) obufStartsWithTab() bool {
	o := c.obuf
	if len(o) > 0 && o[0] == ' ' {
		o = o[1:]
	}
	return len(o) > 0 && o[0] == '\t'
}
