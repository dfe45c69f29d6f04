package lock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Do takes the mutex called name (waiting as Lock does, until ctx ends),
// runs fn while holding it, and releases it. fn's context carries ctx's
// values and ends when ctx ends or the hold ends: lost (cause wrapping
// ErrLost) or the client closed (ErrClosed). Work in fn must watch it.
//
// Do returns the acquisition's error (fn does not run), or fn's error
// joined with what went wrong with the hold: when the hold was lost during
// fn, the error matches ErrLost even if fn returned nil, whether the
// watchdog had found out (the cause of fn's context), fn returned after the
// hold's validity (ValidUntil), or the release found the lock no longer
// held. A hold passed on in-process to another goroutine of its cohort (see
// Client.Lock) is not asked of Redis at the release: a loss that nothing
// had noticed by then goes unreported, as it would with Unlock. The
// release runs even when ctx has ended, bounded by the lease (a second at
// most).
func (c *Client) Do(ctx context.Context, name string, fn func(ctx context.Context) error, opts ...LockOption) error {
	l, err := c.Lock(ctx, name, opts...)
	if err != nil {
		return err
	}
	return do(ctx, l, fn)
}

// TryDo is Do with TryLock: when the mutex is taken it returns an error
// matching ErrNotObtained at once, and fn does not run.
func (c *Client) TryDo(ctx context.Context, name string, fn func(ctx context.Context) error, opts ...LockOption) error {
	l, err := c.TryLock(ctx, name, opts...)
	if err != nil {
		return err
	}
	return do(ctx, l, fn)
}

// hold is what do needs of a hold: a Lock or a MultiHold.
type hold interface {
	Context() context.Context
	ValidUntil() time.Time
	Unlock(ctx context.Context) error
	holdLease() time.Duration
}

func (l *Lock) holdLease() time.Duration { return l.lease }

// do runs fn under h, then releases h (see Do).
func do(ctx context.Context, h hold, fn func(ctx context.Context) error) error {
	hctx := h.Context()
	fctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(hctx, func() { cancel(context.Cause(hctx)) })
	ferr := fn(fctx)
	stop()
	cancel(nil)

	var lost error
	switch cause := context.Cause(hctx); {
	case errors.Is(cause, ErrLost), errors.Is(cause, ErrClosed):
		lost = cause
	case !time.Now().Before(h.ValidUntil()):
		lost = fmt.Errorf("%w: the hold's validity ran out before fn returned", ErrLost)
	}
	uctx, ucancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout(h.holdLease()))
	defer ucancel()
	uerr := h.Unlock(uctx)
	if errors.Is(uerr, ErrNotHeld) {
		// the release found the hold gone: lost during fn
		if lost == nil {
			lost = fmt.Errorf("%w: the release: %w", ErrLost, uerr)
			uerr = nil
		} else if uerr == ErrNotHeld {
			uerr = nil // lost says it
		}
	}
	return errors.Join(ferr, lost, uerr)
}
