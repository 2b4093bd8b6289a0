package service

import (
	"net/http"
	"sync/atomic"

	"github.com/snip/snip-jobs/leadership"
)

// lateSession is the admin server's view of the session, which exists only
// once the backend's server answered: until then it holds no lease.
type lateSession struct {
	s atomic.Pointer[sessionRef]
}

type sessionRef struct{ s *leadership.Session }

func (l *lateSession) set(s *leadership.Session) { l.s.Store(&sessionRef{s}) }

func (l *lateSession) Stats() leadership.Stats {
	if r := l.s.Load(); r != nil {
		return r.s.Stats()
	}
	return leadership.Stats{}
}

func (l *lateSession) Err() error {
	if r := l.s.Load(); r != nil {
		return r.s.Err()
	}
	return nil
}

// lateHandler serves the status page once it exists, 503 before.
type lateHandler struct{ h atomic.Pointer[http.Handler] }

func (l *lateHandler) set(h http.Handler) { l.h.Store(&h) }

func (l *lateHandler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if h := l.h.Load(); h != nil {
		(*h).ServeHTTP(w, req)
		return
	}
	http.Error(w, "starting: waiting for etcd", http.StatusServiceUnavailable)
}
