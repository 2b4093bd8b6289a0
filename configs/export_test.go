package configs

// ParseCounting is Parse, also returning how many YAML nodes the file's
// aliases and merge keys produced: the work Parse did beyond the file as
// written, whatever the machine's speed.
var ParseCounting = parseCounting

// Effective is what the job type's OptionsType kept of o at Parse (what
// Redacted prints).
func Effective(o Options) any { return o.checked.Effective }

// Guard runs the guard before the YAML library on data, a file's text.
func Guard(data []byte) *Error { return checkGuard("guard.yaml", data) }

// GuardCounts reads data as the guard does, with no limits: the deepest
// nesting, the nodes and the longest path it counts.
func GuardCounts(data []byte) (depth, nodes, path int) {
	g := readGuarded(data, guardLimits{1 << 30, 1 << 30, 1 << 30})
	return g.maxDepth, g.nodes, g.maxPath
}
