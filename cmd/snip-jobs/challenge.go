package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/jobs/certrenew"
	"github.com/snip/snip-jobs/jobs/certrenew/certserve"
)

// challengeServers serves HTTP-01 challenge tokens for every certrenew job, on
// every instance (not only the leader): the CA may reach any server behind the
// domain's address. Tokens come from the shared table, held in memory by one
// certserve.Challenges on a connection of its own, so whichever instance the
// CA reaches can answer, and a request from the internet costs no query.
type challengeServers struct {
	servers []*certserve.ChallengeServer
	stop    context.CancelFunc
	done    chan struct{}
	log     *slog.Logger
}

// startChallengeServers listens on each distinct challenge_listen of the
// certrenew jobs; a socket passed as "challenge" replaces them all (one
// certrenew job per database: its tokens are in one table, and any listener
// answers for them). It returns nil when there is nothing to serve.
func startChallengeServers(f *configs.File, pool *pgxpool.Pool, reg prometheus.Registerer, log *slog.Logger, passed net.Listener) (*challengeServers, error) {
	listeners, err := challengeListeners(f, passed)
	if err != nil {
		return nil, err
	}
	if len(listeners) == 0 {
		if passed != nil {
			log.Warn("a challenge socket was passed, but no certrenew job is configured; closing it", "addr", passed.Addr().String())
			passed.Close()
		}
		return nil, nil
	}
	db := pool.Config().ConnConfig.Copy()
	db.RuntimeParams["application_name"] = "snip-jobs challenges " + f.Instance
	tokens, err := certserve.NewChallenges(certserve.Config{DB: db, Log: log, Metrics: reg})
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	cs := &challengeServers{stop: stop, done: make(chan struct{}), log: log}
	go func() {
		defer close(cs.done)
		_ = tokens.Run(ctx)
	}()
	for _, l := range listeners {
		srv := certserve.NewChallengeServer(tokens, certserve.DefaultServerLimits(), log.With("job", l.job))
		cs.servers = append(cs.servers, srv)
		go func() {
			if err := srv.Serve(l.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("HTTP-01 challenge listener stopped", "job", l.job, "addr", l.ln.Addr().String(), "err", err)
			}
		}()
		log.Info("serving HTTP-01 challenges", "job", l.job, "addr", l.ln.Addr().String(), "from", l.from)
	}
	return cs, nil
}

type challengeListener struct {
	job, from string
	ln        net.Listener
}

// challengeListeners opens what the certrenew jobs' challenge_listen name, or
// takes the passed socket instead.
func challengeListeners(f *configs.File, passed net.Listener) ([]challengeListener, error) {
	var out []challengeListener
	seen := map[string]bool{}
	for _, j := range f.Jobs {
		opts, ok := j.Options.(*certrenew.Options)
		switch {
		case !ok:
			continue
		case passed != nil:
			return []challengeListener{{job: j.Name, from: "passed socket", ln: passed}}, nil
		case opts.ChallengeListen == "" || seen[opts.ChallengeListen]:
			continue
		}
		seen[opts.ChallengeListen] = true
		ln, err := net.Listen("tcp", opts.ChallengeListen)
		if err != nil {
			for _, l := range out {
				l.ln.Close()
			}
			return nil, fmt.Errorf("job %q: HTTP-01 challenge listener on %s: %w", j.Name, opts.ChallengeListen, err)
		}
		out = append(out, challengeListener{job: j.Name, from: "challenge_listen", ln: ln})
	}
	return out, nil
}

func (cs *challengeServers) shutdown(ctx context.Context) {
	for _, srv := range cs.servers {
		if err := srv.Shutdown(ctx); err != nil {
			cs.log.Warn("HTTP-01 challenge listener shutdown", "err", err)
		}
	}
	cs.stop()
	select {
	case <-cs.done:
	case <-ctx.Done():
	}
}
