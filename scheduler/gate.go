package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/snip/snip-jobs/scheduler/controls"
)

// Controls is what the scheduler needs of the operators' controls (package
// controls): the controls as last read, false before the first read, and a
// channel closed after the next read. *controls.Feed satisfies it, whichever
// leadership backend the instance uses: the controls live in PostgreSQL.
type Controls interface {
	Current() (controls.State, bool)
	Changed() <-chan struct{}
}

// ErrPaused and ErrDrained are what a run's context ends with (its cause,
// context.Cause, is a *HeldError that matches them) when an operator paused
// its job (`snip-jobs pause`) or drained its instance (`snip-jobs drain`).
var (
	ErrPaused  = errors.New("paused by an operator")
	ErrDrained = errors.New("instance drained by an operator")
)

// HeldError says who holds a job back on this instance, since when and why:
// its job's pause (matches ErrPaused) or its instance's drain (ErrDrained).
type HeldError struct {
	Kind   error // ErrPaused or ErrDrained
	By     string
	Since  time.Time
	Reason string
}

func (e *HeldError) Error() string {
	what := "paused"
	if e.Kind == ErrDrained {
		what = "instance drained"
	}
	s := fmt.Sprintf("%s by %s at %s", what, e.By, e.Since.UTC().Format(time.RFC3339))
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return s
}

func (e *HeldError) Unwrap() error { return e.Kind }

// errControlsUnread holds every job back until the controls have been read
// once: a job paused before this instance started stays paused.
var errControlsUnread = errors.New("waiting for the operators' controls to be read from PostgreSQL")

// gate says whether a job may run on this instance now, by the controls: not
// while it is paused, nor (a singleton) while this instance is drained, nor
// before the controls were read. Without controls (no database) every job
// may run.
type gate struct {
	ctl      Controls
	instance string
	pool     *pgxpool.Pool // for heldNow; nil: the controls as last read
}

// held is why job j may not run here now; nil when it may.
func (g *gate) held(j *job) error {
	if g == nil || g.ctl == nil {
		return nil
	}
	st, read := g.ctl.Current()
	if !read {
		return errControlsUnread
	}
	if p, ok := st.Paused(j.spec.Name); ok {
		return &HeldError{Kind: ErrPaused, By: p.By, Since: p.Since, Reason: p.Reason}
	}
	if j.mode != everywhere {
		if d, ok := st.Drained(g.instance); ok {
			return &HeldError{Kind: ErrDrained, By: d.By, Since: d.Since, Reason: d.Reason}
		}
	}
	return nil
}

// heldNow is held, read from PostgreSQL now rather than from the controls
// as last read: a term that starts checks it before the job runs, so that a
// term won after a pause's (or a drain's) commit never runs the job, however
// late its own read of the controls comes. A database that does not answer
// leaves the controls as last read to decide.
func (g *gate) heldNow(ctx context.Context, j *job) error {
	if g == nil || g.ctl == nil || g.pool == nil {
		return g.held(j)
	}
	qctx, cancel := context.WithTimeout(ctx, recordTimeout)
	defer cancel()
	p, d, err := controls.Holding(qctx, g.pool, j.spec.Name, g.instance)
	switch {
	case err != nil:
		return g.held(j)
	case p != nil:
		return &HeldError{Kind: ErrPaused, By: p.By, Since: p.Since, Reason: p.Reason}
	case d != nil && j.mode != everywhere:
		return &HeldError{Kind: ErrDrained, By: d.By, Since: d.Since, Reason: d.Reason}
	}
	return nil
}

// changed is closed after the controls' next read; nil (never) without
// controls.
func (g *gate) changed() <-chan struct{} {
	if g == nil || g.ctl == nil {
		return nil
	}
	return g.ctl.Changed()
}

// wait returns true once job j may run here, false if ctx ends first. It
// logs why it waits, once for each reason.
func (g *gate) wait(ctx context.Context, j *job) bool {
	var said string
	for {
		ch := g.changed()
		err := g.held(j)
		if err == nil {
			return true
		}
		if msg := err.Error(); msg != said {
			said = msg
			j.log.Info("not running the job here", "why", msg)
		}
		select {
		case <-ctx.Done():
			return false
		case <-ch:
		}
	}
}

// stopWhenHeld calls stop with the *HeldError once job j may no longer run
// here, unless ctx ends first; the function it returns stops watching.
func (g *gate) stopWhenHeld(ctx context.Context, j *job, stop func(error)) func() {
	if g == nil || g.ctl == nil {
		return func() {}
	}
	wctx, cancel := context.WithCancel(ctx)
	go func() {
		for {
			ch := g.changed()
			var held *HeldError
			if errors.As(g.held(j), &held) {
				stop(held)
				return
			}
			select {
			case <-wctx.Done():
				return
			case <-ch:
			}
		}
	}()
	return cancel
}

// whileAllowed is ctx, ended (its cause the *HeldError) once job j may no
// longer run here; call the function it returns when done with it.
func (g *gate) whileAllowed(ctx context.Context, j *job) (context.Context, func()) {
	cctx, cancel := context.WithCancelCause(ctx)
	unwatch := g.stopWhenHeld(cctx, j, cancel)
	return cctx, func() { unwatch(); cancel(nil) }
}

// state is the controls as last read (the zero State without controls, or
// before the first read).
func (g *gate) state() controls.State {
	if g == nil || g.ctl == nil {
		return controls.State{}
	}
	st, _ := g.ctl.Current()
	return st
}

// serialKey marks a context whose runs take turns (withSerial).
type serialKey struct{}

// withSerial makes the runs started under ctx take turns (runner.call): one
// at a time on this instance, scheduled and manual alike.
func withSerial(ctx context.Context) context.Context {
	return context.WithValue(ctx, serialKey{}, make(chan struct{}, 1))
}

// takeTurn waits for ctx's turn (withSerial), unless ctx ends first; release
// gives it back. A context without turns runs at once.
func takeTurn(ctx context.Context) (release func(), err error) {
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	sem, _ := ctx.Value(serialKey{}).(chan struct{})
	if sem == nil {
		return func() {}, nil
	}
	select {
	case sem <- struct{}{}:
		return func() { <-sem }, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}
