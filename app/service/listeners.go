package service

import (
	"context"
	"fmt"
	"log/slog"
	"net"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/scheduler"
)

// typeListeners are the sockets the configured job types declared
// (scheduler.Listener), served on every instance; stops ends them.
type typeListeners struct {
	stops []func(context.Context)
}

// startListeners opens and serves the listeners of every registered type: a
// socket passed under a listener's Socket name replaces the addresses its
// jobs name (the first job of the type answers for it); jobs naming the same
// address share one socket. A type without jobs serves nothing, and a socket
// passed for it is closed.
func startListeners(f *configs.File, reg *scheduler.Registry, env scheduler.Env, socks Sockets) (*typeListeners, error) {
	tl := &typeListeners{}
	for _, name := range reg.Names() {
		t, _ := reg.Type(name)
		for _, l := range t.Listeners {
			open, err := openListener(f, t.Name, l, socks.take(l.Socket), env.Log)
			if err == nil && len(open) > 0 {
				var stop func(context.Context)
				if stop, err = l.Serve(env, open); err == nil {
					tl.stops = append(tl.stops, stop)
					continue
				}
				closeAll(open)
			}
			if err != nil {
				tl.shutdown(context.Background())
				return nil, err
			}
		}
	}
	return tl, nil
}

// openListener opens what the jobs of type typ name for l, or takes the
// passed socket instead.
func openListener(f *configs.File, typ string, l scheduler.Listener, passed net.Listener, log *slog.Logger) ([]scheduler.Socket, error) {
	var out []scheduler.Socket
	seen := map[string]bool{}
	for _, j := range f.Jobs {
		if j.Type != typ {
			continue
		}
		if passed != nil {
			return []scheduler.Socket{{Job: j.Name, From: "passed socket", Listener: passed}}, nil
		}
		addr, err := "", error(nil)
		if l.Addr != nil {
			if addr, err = l.Addr(j); err != nil {
				closeAll(out)
				return nil, fmt.Errorf("job %q: %s listener: %w", j.Name, l.Name, err)
			}
		}
		if addr == "" || seen[addr] {
			continue
		}
		seen[addr] = true
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			closeAll(out)
			return nil, fmt.Errorf("job %q: %s listener on %s: %w", j.Name, l.Name, addr, err)
		}
		out = append(out, scheduler.Socket{Job: j.Name, From: l.Option, Listener: ln})
	}
	if passed != nil {
		log.Warn(fmt.Sprintf("a %s socket was passed, but no %s job is configured; closing it", l.Socket, typ), "addr", passed.Addr().String())
		passed.Close()
	}
	return out, nil
}

func closeAll(socks []scheduler.Socket) {
	for _, s := range socks {
		s.Listener.Close()
	}
}

func (tl *typeListeners) shutdown(ctx context.Context) {
	for _, stop := range tl.stops {
		stop(ctx)
	}
}
