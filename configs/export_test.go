package configs

// ParseCounting is Parse, also returning how many YAML nodes the file's
// aliases and merge keys produced: the work Parse did beyond the file as
// written, whatever the machine's speed.
var ParseCounting = parseCounting

// Effective is what the job type's OptionsType kept of o at Parse (what
// Redacted prints).
func Effective(o Options) any { return o.checked.Effective }

// ShapeOf scans data as checkShape does, with no limits, and returns the
// deepest nesting of lists and mappings it found, the nodes it counted, and
// every token the YAML library's scanner makes of data (comments and invalid
// ones too).
func ShapeOf(data []byte) (depth, nodes, tokens int) {
	s := scanShape(data, shapeCaps{1 << 30, 1 << 30, 1 << 30, 1 << 62})
	return s.meter.maxDepth, s.meter.nodes, s.meter.tokens
}

// Guard runs the guard before the YAML library on data, a file's text.
func Guard(data []byte) *Error { return checkShape("guard.yaml", data) }
