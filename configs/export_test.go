package configs

// ParseCounting is Parse, also returning how many YAML nodes the file's
// aliases and merge keys produced: the work Parse did beyond the file as
// written, whatever the machine's speed.
var ParseCounting = parseCounting

// Effective is what the job type's OptionsType kept of o at Parse (what
// Redacted prints).
func Effective(o Options) any { return o.checked.Effective }
