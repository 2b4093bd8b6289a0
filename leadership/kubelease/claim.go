package kubelease

import (
	"context"
	"fmt"
	"strconv"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/snip/snip-jobs/leadership"
)

// claim is a job Lease this session's incarnation h took: its token
// annotation, bumped by the write that named h's holder, is the term's token.
type claim struct {
	h     *lease
	name  string // the job Lease
	token int64
}

func (c *claim) Token() int64 { return c.token }

// mine reports whether the job Lease still records this term.
func (c *claim) mine(jl *coordv1.Lease) bool {
	tok, err := tokenOf(jl)
	return err == nil && tok == c.token && holderOf(jl) == c.h.holder
}

// another reports whether jl, as the observer holds it, records a later
// term or this term released: a version with this term's token was written
// by it, and tokens only grow. Anything else (absent, an older token) may be
// the observer lagging this term's win, and is settled by a read.
func (c *claim) another(jl *coordv1.Lease) bool {
	tok, err := tokenOf(jl)
	return jl != nil && err == nil && (tok > c.token || tok == c.token && holderOf(jl) != c.h.holder)
}

// Follow returns when the job Lease, as the session's observer sees it, is
// deleted or records another term. The observer's copy is judged alone when
// that is certain; otherwise a read settles it, once per version the
// observer holds. The deadline, not this, is what keeps terms apart: another
// instance takes the job only after this term's instance Lease is gone.
func (c *claim) Follow(ctx context.Context) *leadership.EndedError {
	obs := c.h.st.obs
	settled := "" // resourceVersion of the observer's copy a read has settled
	for ctx.Err() == nil {
		jl, changed := obs.lease(c.name)
		switch {
		case c.mine(jl):
		case c.another(jl):
			return c.lost(jl, "job Lease %s records another term (holder %q, token %q)", c.name, holderOf(jl), jl.Annotations[annToken])
		case jl == nil || jl.ResourceVersion != settled:
			if cause := c.settle(ctx); cause != nil {
				return cause
			}
			if jl != nil {
				settled = jl.ResourceVersion
			}
		}
		select {
		case <-changed:
		case <-ctx.Done():
		}
	}
	return nil
}

// lost is why jl no longer records this term: taken over when its takeover
// annotation names this term (Cluster.TakeOver writes it with the release),
// else lost.
func (c *claim) lost(jl *coordv1.Lease, format string, args ...any) *leadership.EndedError {
	if jl.Annotations[annTakenOver] == strconv.FormatInt(c.token, 10) {
		return leadership.Ended(leadership.ReasonTakenOver, "job Lease %s taken over by %s", c.name, jl.Annotations[annTakenBy])
	}
	return leadership.Ended(leadership.ReasonKeyLost, format, args...)
}

// settle reads the job Lease: why the term is over when it is gone or records
// another term. A failed read is left to the next change (the deadline ends
// the term if the API server stays away).
func (c *claim) settle(ctx context.Context) *leadership.EndedError {
	st := c.h.st
	ctx, cancel := context.WithTimeout(ctx, st.cfg.RenewInterval)
	defer cancel()
	jl, err := st.leases.Get(ctx, c.name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return leadership.Ended(leadership.ReasonKeyLost, "job Lease %s gone", c.name)
	case err != nil:
		return nil
	case !c.mine(jl):
		return c.lost(jl, "job Lease %s records another term", c.name)
	}
	return nil
}

// Release releases the job Lease (holder cleared, token kept) if it still
// records this term, so that a waiting candidate wins at once.
func (c *claim) Release(ctx context.Context) error {
	leases := c.h.st.leases
	jl, err := leases.Get(ctx, c.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return refused(err)
	}
	if !c.mine(jl) {
		return nil
	}
	jl.Spec.HolderIdentity = nil
	delete(jl.Annotations, annResign)
	_, err = leases.Update(ctx, jl, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return refused(err) // a conflict is tried again
}

// refused marks an error the API server will answer again whatever is
// tried: the account lacks the permission.
func refused(err error) error {
	if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
		return fmt.Errorf("%w: %w", leadership.ErrRefused, err)
	}
	return err
}
