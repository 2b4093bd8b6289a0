package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/jobs/builtin"
	"github.com/snip/snip-jobs/scheduler"
)

const (
	defaultConfigPath = "/etc/snip-jobs/snip-jobs.yaml"
	configEnv         = "SNIP_JOBS_CONFIG"
)

// configFlag adds --config to fs.
func configFlag(fs *flag.FlagSet) *string {
	def := os.Getenv(configEnv)
	if def == "" {
		def = defaultConfigPath
	}
	return fs.String("config", def, "the config file; the default is $"+configEnv+" when set")
}

// loadConfig loads the config file with the built-in job types. Problems in the
// file are a usage error (exit 2), each on its own line as file:line:col.
func loadConfig(path string) (*configs.File, error) {
	f, err := configs.Load(path, registry())
	if err != nil {
		return nil, &exitError{code: 2, err: err}
	}
	return f, nil
}

// newLogger builds the process's logger from the config: JSON unless the
// format is text, or auto and w is a terminal.
func newLogger(cfg configs.Log, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: cfg.Level}
	f, isFile := w.(*os.File)
	text := cfg.Format == configs.LogText || (cfg.Format != configs.LogJSON && isFile && isTerminal(f))
	if text {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// writeLines writes each line of s to w, prefixed.
func writeLines(w io.Writer, prefix, s string) {
	for _, line := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		fmt.Fprintf(w, "%s%s\n", prefix, line)
	}
}

// registry is every job type built into this binary (package builtin).
func registry() *scheduler.Registry { return builtin.Registry() }
