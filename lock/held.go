package lock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Lock is a held lock. Its methods are safe for concurrent use.
type Lock struct {
	c    *Client
	name string
	rkey string // the lock
	fkey string // fence counter
	tok  string // hold token: this acquisition and no other
	lockConfig
	leaseArg string    // lease in ms, for the scripts
	token    int64     // fencing token
	tokens   []int64   // Redlock: the token of each node, 0 where not acquired
	acquired time.Time // when the last acquire request was sent
	kv       [7]string // keys and arguments of the acquire script

	mu         sync.Mutex
	validUntil time.Time   // the lease surely still runs before this
	timer      *time.Timer // the watchdog's next renewal
	deadline   *time.Timer // the lease's end; under a watchdog, made by the first renewal
	lastErr    error       // of the last failed renewal
	stopped    bool        // no more renewals: Unlock was called, or the lock was lost
	released   bool        // Unlock got its answer: later Unlocks stay local
	cause      error       // why the context ended, nil while it runs
	ctx        context.Context
	cancel     context.CancelCauseFunc
}

// A plain lock is a string in Redis; a reentrant lock, or one with
// metadata, a hash (see scripts/acquire.lua).
func (l *Lock) isHash() bool { return l.owner != "" || l.metadata != "" }

// kindArg is the kind argument of the acquire script (see acquire.lua).
func (l *Lock) kindArg() string {
	switch {
	case l.owner != "":
		return "r:" + l.owner // never "-"
	case l.metadata != "":
		return "-"
	}
	return ""
}

// hashArg is the kind argument of the other scripts.
func (l *Lock) hashArg() string {
	if l.isHash() {
		return "h"
	}
	return ""
}

// arm starts the watchdog, or the timer of a fixed lease's end.
func (l *Lock) arm() {
	l.mu.Lock()
	if l.watchdog {
		l.timer = time.AfterFunc(l.lease/3, l.renew)
	} else {
		l.deadline = time.AfterFunc(time.Until(l.validUntil), l.expire)
	}
	l.mu.Unlock()
}

// stopTimers stops the watchdog and the lease timer. l.mu is held.
func (l *Lock) stopTimers() {
	if l.timer != nil {
		l.timer.Stop()
	}
	if l.deadline != nil {
		l.deadline.Stop()
	}
}

// Key returns the name the lock was taken with.
func (l *Lock) Key() string { return l.name }

// Token returns the fencing token: it is larger than the token of every
// earlier holder of this name (see the package documentation for the
// conditions). Hand it to the protected resource with every write, and let
// the resource refuse a token lower than one it has seen. A reentrant
// acquisition returns the token of the hold it joins. For Redlock it is the
// largest of the nodes' tokens, which is not ordered across holders: see
// Tokens.
func (l *Lock) Token() int64 { return l.token }

// Tokens returns the fencing token of each node: for a single Redis, one;
// for Redlock, one per node (0 where the lock was not acquired). Any two
// Redlock majorities share a node, so a resource can fence Redlock holders
// with these: keep, per node, the largest token seen, and accept a write only
// if none of its non-zero tokens is below the one kept for that node (then
// raise the kept ones). A single Redlock token cannot do that: each node
// counts on its own.
func (l *Lock) Tokens() []int64 {
	if l.tokens == nil {
		return []int64{l.token}
	}
	return append([]int64(nil), l.tokens...)
}

// Metadata returns the metadata given with WithMetadata.
func (l *Lock) Metadata() string { return l.metadata }

// Context returns a context that is cancelled the moment the lock is known
// to be lost, with cause (see context.Cause) wrapping ErrLost; when Unlock is
// called, with cause context.Canceled; and when the Client is closed, with
// cause ErrClosed. Work protected by the lock should stop when it ends.
func (l *Lock) Context() context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx == nil {
		l.ctx, l.cancel = context.WithCancelCause(l.c.ctx)
		if l.cause != nil {
			l.cancel(l.cause)
		}
	}
	return l.ctx
}

// Done is short for Context().Done().
func (l *Lock) Done() <-chan struct{} { return l.Context().Done() }

// end ends the context with cause, unless it already ended. l.mu is held.
func (l *Lock) end(cause error) {
	if l.cause != nil {
		return
	}
	l.cause = cause
	if l.cancel != nil {
		l.cancel(cause)
	}
}

// lose marks the lock lost and returns cause. l.mu is held.
func (l *Lock) lose(cause error) error {
	l.stopped = true
	l.stopTimers()
	l.end(cause)
	return cause
}

// unlockAndReport releases l.mu, then calls the Lost hook if lost is set.
func (l *Lock) unlockAndReport(lost error) {
	l.mu.Unlock()
	if h := l.c.hooks.Lost; h != nil && lost != nil {
		h(l.name, lost)
	}
}

var errNoAnswer = errors.New("no answer from Redis")

// renew is the watchdog: it runs every third of the lease while the lock is
// held, and more often while renewals fail. The lease timer, not the
// renewal, declares the lock lost when the lease runs out: a renewal may
// hang longer than that (go-redis ignores context deadlines by default).
func (l *Lock) renew() {
	l.mu.Lock()
	if l.stopped || l.c.ctx.Err() != nil {
		l.mu.Unlock()
		return
	}
	deadline := l.validUntil
	if l.deadline == nil {
		l.deadline = time.AfterFunc(time.Until(deadline), l.expire)
	}
	l.mu.Unlock()

	ctx, cancel := context.WithDeadline(l.c.ctx, deadline)
	start := time.Now()
	st, err := l.c.extend(ctx, l, l.lease)
	cancel()
	if h := l.c.hooks.Renew; h != nil {
		h(l.name, time.Since(start), err)
	}

	var lost error
	l.mu.Lock()
	defer func() { l.unlockAndReport(lost) }()
	if l.stopped || l.c.ctx.Err() != nil {
		return // released, lost or closed meanwhile: the answer no longer matters
	}
	switch st {
	case done:
		l.validUntil = start.Add(l.lease - drift(l.lease))
		l.deadline.Reset(time.Until(l.validUntil))
		l.timer.Reset(l.lease / 3)
	case refused:
		lost = l.lose(fmt.Errorf("%w: renewal refused: the lock expired or was taken over", ErrLost))
	default:
		l.lastErr = err
		if left := time.Until(l.validUntil); left > 0 {
			l.timer.Reset(min(max(l.lease/10, 10*time.Millisecond), left))
		}
	}
}

// expire ends the lease, unless it was renewed or extended meanwhile.
func (l *Lock) expire() {
	var lost error
	l.mu.Lock()
	defer func() { l.unlockAndReport(lost) }()
	if l.stopped {
		return
	}
	if left := time.Until(l.validUntil); left > 0 {
		l.deadline.Reset(left)
		return
	}
	if l.watchdog {
		why := l.lastErr
		if why == nil {
			why = errNoAnswer
		}
		lost = l.lose(fmt.Errorf("%w: not renewed within the lease: %w", ErrLost, why))
	} else {
		lost = l.lose(fmt.Errorf("%w: the lease ran out", ErrLost))
	}
}

// Extend sets the lease to ttl from now. For a lock with a fixed lease
// (WithTTL) this moves its end; under a watchdog it renews at once, and the
// watchdog goes on renewing with its own lease. It returns ErrNotHeld when
// the lock is no longer held, in which case the lock is lost.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	l.mu.Lock()
	stopped := l.stopped
	l.mu.Unlock()
	if stopped {
		return ErrNotHeld
	}
	start := time.Now()
	st, err := l.c.extend(ctx, l, ttl)
	if h := l.c.hooks.Renew; h != nil {
		h(l.name, time.Since(start), err)
	}
	var lost error
	l.mu.Lock()
	defer func() { l.unlockAndReport(lost) }()
	if l.stopped {
		return ErrNotHeld
	}
	switch st {
	case done:
		l.validUntil = start.Add(ttl - drift(ttl))
		if l.deadline != nil {
			l.deadline.Reset(time.Until(l.validUntil))
		}
		return nil
	case refused:
		lost = l.lose(fmt.Errorf("%w: extension refused: the lock expired or was taken over", ErrLost))
		return ErrNotHeld
	}
	return err
}

// TTL returns the lease left on the server, or ErrNotHeld.
func (l *Lock) TTL(ctx context.Context) (time.Duration, error) {
	return l.c.pttl(ctx, l)
}

// Unlock releases the lock: the watchdog stops first, so no renewal follows
// the release, and the context ends. It returns ErrNotHeld when the lock was
// no longer held; calling it again is harmless. On a Redis error the lock
// may or may not be released; calling Unlock again retries, and the lock
// expires within its lease in any case.
func (l *Lock) Unlock(ctx context.Context) error {
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return ErrNotHeld
	}
	l.stopped = true
	l.stopTimers()
	l.end(context.Canceled)
	l.mu.Unlock()

	c := l.c
	var next *waiter
	var more bool
	if len(c.nodes) == 1 && !l.isHash() {
		next, more = c.waiters.claim(l.rkey)
	}
	var start time.Time
	if next != nil {
		start = time.Now()
	}
	st, token, err := c.release(ctx, l, next, more)
	if h := c.hooks.Release; h != nil {
		h(l.name, time.Since(l.acquired), err)
	}
	if st != failed {
		l.mu.Lock()
		l.released = true
		l.mu.Unlock()
	}
	if next != nil {
		if abandoned := c.waiters.resolve(next, st == handed, token, start); abandoned != nil {
			_ = abandoned.Unlock(context.WithoutCancel(ctx))
		}
	}
	return err
}
