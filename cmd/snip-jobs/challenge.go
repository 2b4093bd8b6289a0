package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/jobs/certrenew"
)

// challengeServers serves HTTP-01 challenge tokens for every certrenew job, on
// every instance (not only the leader): the CA may reach any server behind the
// domain's address. Tokens come from the shared table, so whichever instance
// the CA reaches can answer.
type challengeServers struct {
	servers []*http.Server
	log     *slog.Logger
}

// startChallengeServers listens on each distinct challenge_listen of the
// certrenew jobs; a socket passed as "challenge" replaces them all (one
// certrenew job per database: its tokens are in one table, and any listener
// answers for them).
func startChallengeServers(f *configs.File, pool *pgxpool.Pool, log *slog.Logger, passed net.Listener) (*challengeServers, error) {
	cs := &challengeServers{log: log}
	seen := map[string]bool{}
	for _, j := range f.Jobs {
		opts, ok := j.Options.(*certrenew.Options)
		if !ok {
			continue
		}
		ln, from := passed, "passed socket"
		switch {
		case passed != nil && cs.servers != nil:
			continue // served already, on the passed socket
		case passed == nil && (opts.ChallengeListen == "" || seen[opts.ChallengeListen]):
			continue
		case passed == nil:
			seen[opts.ChallengeListen] = true
			var err error
			if ln, err = net.Listen("tcp", opts.ChallengeListen); err != nil {
				cs.shutdown(context.Background())
				return nil, fmt.Errorf("job %q: HTTP-01 challenge listener on %s: %w", j.Name, opts.ChallengeListen, err)
			}
			from = "challenge_listen"
		}
		srv := &http.Server{
			Handler:           certrenew.NewChallengeHandler(pool, log.With("job", j.Name)),
			ReadHeaderTimeout: 10 * time.Second,
		}
		cs.servers = append(cs.servers, srv)
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("HTTP-01 challenge listener stopped", "job", j.Name, "addr", ln.Addr().String(), "err", err)
			}
		}()
		log.Info("serving HTTP-01 challenges", "job", j.Name, "addr", ln.Addr().String(), "from", from)
	}
	if passed != nil && cs.servers == nil {
		log.Warn("a challenge socket was passed, but no certrenew job is configured; closing it", "addr", passed.Addr().String())
		passed.Close()
	}
	return cs, nil
}

func (cs *challengeServers) shutdown(ctx context.Context) {
	for _, srv := range cs.servers {
		if err := srv.Shutdown(ctx); err != nil {
			cs.log.Warn("HTTP-01 challenge listener shutdown", "err", err)
		}
	}
}
