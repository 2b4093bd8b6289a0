package certserve

import (
	"log/slog"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"
)

// ServerLimits bound what clients from the internet can hold of a challenge
// listener. The CA's validation is one small GET per perspective; nothing a
// legitimate client sends needs more.
type ServerLimits struct {
	ReadHeaderTimeout time.Duration // from accept to the end of the headers
	ReadTimeout       time.Duration // the whole request, body included
	WriteTimeout      time.Duration
	IdleTimeout       time.Duration // a kept-alive connection between requests
	MaxHeaderBytes    int
	MaxConns          int // open connections; more wait in the kernel's backlog
}

// DefaultServerLimits are the limits snip-jobs' challenge listener uses.
func DefaultServerLimits() ServerLimits {
	return ServerLimits{
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       30 * time.Second,
		MaxHeaderBytes:    8 << 10,
		MaxConns:          2048,
	}
}

// ChallengeServer is an HTTP server for port 80 that can face the internet:
// h (a *Challenges, or a mux holding it) behind ServerLimits.
type ChallengeServer struct {
	http.Server
	maxConns int
}

// NewChallengeServer makes the server; log receives the server's own errors
// (TLS handshakes on port 80, malformed requests), nil discards them.
func NewChallengeServer(h http.Handler, l ServerLimits, log *slog.Logger) *ChallengeServer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &ChallengeServer{
		Server: http.Server{
			Handler:           h,
			ReadHeaderTimeout: l.ReadHeaderTimeout,
			ReadTimeout:       l.ReadTimeout,
			WriteTimeout:      l.WriteTimeout,
			IdleTimeout:       l.IdleTimeout,
			MaxHeaderBytes:    l.MaxHeaderBytes,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		},
		maxConns: l.MaxConns,
	}
}

// Serve serves ln with at most MaxConns connections open at once.
func (s *ChallengeServer) Serve(ln net.Listener) error {
	if s.maxConns > 0 {
		ln = netutil.LimitListener(ln, s.maxConns)
	}
	return s.Server.Serve(ln)
}
