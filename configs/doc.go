// Package configs reads the snip-jobs configuration file: the instance's name, how
// to reach etcd and PostgreSQL, leadership timing, the HTTP listener, logging and the
// list of jobs.
//
// Parse checks the whole file and reports every problem it finds at once, each as
// "file:line:col: message" (with the job's name when the problem is inside a job),
// so that `snip-jobs validate` shows an operator everything to fix in one pass.
// Nothing is silently ignored: unknown keys, duplicate keys, and settings that have
// no effect where they are written (a time zone on an interval job, TLS files for the
// embedded etcd) are errors.
//
// A job's options are its type's business: Parse keeps them as a YAML node with
// its positions (Options) and has the type check them (Types.Options, usually
// OptionsOf), so that a bad option is reported at its line like everything else;
// the type decodes the same node into its own value (DecodeOptions). Where a job
// runs (Job.Mode) is derived here, once.
//
// A hostile or mangled file costs bounded work: Parse refuses a file over
// MaxFileSize, text that is not UTF-8 (at the first bad byte; a UTF-8 byte order
// mark is skipped), lists and mappings nested more than MaxDepth deep, more
// than MaxNodes YAML nodes, keys leading to a value longer than MaxKeyPath
// together, and text that would take the library's scanner more than
// MaxScanSteps (each at the place that crosses it, before the library's
// parser reads the file: the bytes are read first for the scanner's steps
// and a bound on its tokens (MaxWords words and indicators), then the
// scanner's own tokens are counted and read as the parser will, counting at
// least the depth and key paths it would build: its cost grows with the
// square of the depth, with keys times the values below them, and with the
// square of runs of "<" and of tabs in double-quoted text), and aliases and merge keys that would produce more than
// MaxAliasNodes nodes (at the alias whose expansion crosses it), instead of
// expanding them. Within those limits the YAML library parses the whole file
// as written.
//
// Secrets are never held in a File: the file names where they live (an environment
// variable or a file), and DatabaseURL and EtcdPassword read them when asked. The
// values never appear in an error or in Redacted.
//
// Every file the config names (Files: secrets, certificates, a kubeconfig, the
// files a job's options name) is read by ReadFile, through one bounded reader
// (internal/boundedfile): only if it is a regular file (a named pipe or a device
// is never opened), no further than its kind allows (MaxSecretFileSize,
// MaxCertificateFileSize, MaxFileSize for a kubeconfig), and for a secret only if
// its group and others cannot write it. CheckFiles, which run and validate apply
// at once to every file the config names, refuses those, each at the
// file:line:col of the setting naming it, and reports the secret files others
// may read. The config file itself is read through the same reader.
//
// snip-jobs.example.yaml in this directory documents every setting and its default.
package configs
