package etcdlocal

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// ZapLogger returns a zap logger (what etcd's server and client log through)
// that writes entries at min or above to log, so that etcd's lines come out in
// the process's own format. The errors etcd logs for every listener it closes
// at shutdown are dropped.
func ZapLogger(log *slog.Logger, min zapcore.Level) *zap.Logger {
	return zap.New(&slogCore{log: log, min: min})
}

type slogCore struct {
	log    *slog.Logger
	min    zapcore.Level
	fields []zapcore.Field
}

func (c *slogCore) Enabled(l zapcore.Level) bool { return l >= c.min }

func (c *slogCore) With(fields []zapcore.Field) zapcore.Core {
	return &slogCore{log: c.log, min: c.min, fields: append(c.fields[:len(c.fields):len(c.fields)], fields...)}
}

func (c *slogCore) Check(ent zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(ent.Level) {
		return ce.AddCore(ent, c)
	}
	return ce
}

func (c *slogCore) Write(ent zapcore.Entry, fields []zapcore.Field) error {
	all := append(c.fields[:len(c.fields):len(c.fields)], fields...)
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range all {
		if f.Type == zapcore.ErrorType {
			if err, ok := f.Interface.(error); ok && closedErr(err) {
				return nil // shutdown noise
			}
		}
		f.AddTo(enc)
	}
	attrs := make([]slog.Attr, 0, len(enc.Fields)+1)
	if ent.LoggerName != "" {
		attrs = append(attrs, slog.String("logger", ent.LoggerName))
	}
	for k, v := range enc.Fields {
		attrs = append(attrs, slog.Any(k, v))
	}
	c.log.LogAttrs(context.Background(), slogLevel(ent.Level), ent.Message, attrs...)
	return nil
}

func (c *slogCore) Sync() error { return nil }

func slogLevel(l zapcore.Level) slog.Level {
	switch {
	case l >= zapcore.ErrorLevel:
		return slog.LevelError
	case l == zapcore.WarnLevel:
		return slog.LevelWarn
	case l == zapcore.InfoLevel:
		return slog.LevelInfo
	}
	return slog.LevelDebug
}

func closedErr(err error) bool {
	return errors.Is(err, net.ErrClosed) || errors.Is(err, http.ErrServerClosed) ||
		strings.Contains(err.Error(), "mux: server closed") || strings.Contains(err.Error(), "server stopped")
}
