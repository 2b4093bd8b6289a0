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
// Secrets are never held in a File: the file names where they live (an environment
// variable or a file), and DatabaseURL and EtcdPassword read them when asked. The
// values never appear in an error or in Redacted.
//
// snip-jobs.example.yaml in this directory documents every setting and its default.
package configs
