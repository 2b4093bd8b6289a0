package certrenew

import (
	"context"
	"errors"
	"net/http"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/jobs/certrenew/certserve"
	"github.com/snip/snip-jobs/scheduler"
)

// ChallengePath is where HTTP-01 tokens are served (RFC 8555 §8.3). Every
// instance serves them from memory with certserve.Challenges.
const ChallengePath = certserve.ChallengePath

// ChallengeSocket is the name of a passed socket (systemd's
// FileDescriptorName=) that replaces the jobs' challenge_listen: port 80
// without privileges, held across restarts.
const ChallengeSocket = "challenge"

// challengeListener is the type's HTTP-01 challenge listener: every instance
// (not only the leader) answers, since the CA may reach any server behind the
// domain's address. Tokens come from the shared table, held in memory by one
// certserve.Challenges on a connection of its own, so whichever instance the
// CA reaches can answer, and a request from the internet costs no query.
func challengeListener() scheduler.Listener {
	return scheduler.Listener{
		Name:   "HTTP-01 challenge",
		Socket: ChallengeSocket,
		Addr: func(spec configs.Job) (string, error) {
			o, err := configs.DecodeOptions(spec, DefaultOptions)
			return o.ChallengeListen, err
		},
		Option: "challenge_listen",
		Serve:  serveChallenges,
	}
}

// serveChallenges answers HTTP-01 challenges on socks until stop.
func serveChallenges(env scheduler.Env, socks []scheduler.Socket) (stop func(context.Context), err error) {
	if env.Pool == nil {
		return nil, errors.New("HTTP-01 challenges: the tokens are in PostgreSQL, and no database is configured")
	}
	db := env.Pool.Config().ConnConfig.Copy()
	db.RuntimeParams["application_name"] = "snip-jobs challenges " + env.Instance
	tokens, err := certserve.NewChallenges(certserve.Config{DB: db, Log: env.Log, Metrics: env.Metrics})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = tokens.Run(ctx)
	}()
	servers := make([]*certserve.ChallengeServer, 0, len(socks))
	for _, s := range socks {
		srv := certserve.NewChallengeServer(tokens, certserve.DefaultServerLimits(), env.Log.With("job", s.Job))
		servers = append(servers, srv)
		go func() {
			// Accept at once: a request that arrives before every pending
			// token is in memory (just after a restart) waits in the handler
			// for them, up to its load wait, and is answered 503 if
			// PostgreSQL has not answered by then — never left in the
			// socket's queue for as long as the database is silent.
			if err := srv.Serve(s.Listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
				env.Log.Error("HTTP-01 challenge listener stopped", "job", s.Job, "addr", s.Listener.Addr().String(), "err", err)
			}
		}()
		env.Log.Info("serving HTTP-01 challenges", "job", s.Job, "addr", s.Listener.Addr().String(), "from", s.From)
	}
	return func(ctx context.Context) {
		for _, srv := range servers {
			if err := srv.Shutdown(ctx); err != nil {
				env.Log.Warn("HTTP-01 challenge listener shutdown", "err", err)
			}
		}
		cancel()
		select {
		case <-done:
		case <-ctx.Done():
		}
	}, nil
}
