package lock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// MultiLock is several mutexes taken together, all or none, as Redisson's
// RedissonMultiLock: for work that needs every one of them (move stock
// between two warehouses, each with its lock). Its hold (MultiHold) is a
// hold of each mutex, with one context, one validity and one Unlock.
//
// The mutexes are taken one after another in one global order, that of
// their keys (sorted, each key once), whatever the order of the names given:
// a multi-lock waiting for a mutex holds only mutexes before it in that
// order, so multi-locks over overlapping sets, given in any orders, never
// wait for one another in a circle, and never deadlock (nor does a plain
// Lock of one name, which holds nothing while it waits). A holder that
// waits for a lock while holding another one outside a MultiLock must take
// them in the same order. Names that are one lock ("a" and "{a}": both
// prefix+"{a}") count once.
//
// All or none is not atomic: the parts are separate acquisitions, each
// atomic on its own, so for a moment a multi-lock that fails may hold some
// of its names (another TryLock may then find one taken), and releases them
// before it returns. This is the same on one Redis and on a Cluster, where
// names in different hash slots (on different masters) cannot be taken by
// one script: each part is the lock of its own name, with that lock's
// guarantees (at most one holder, its lease, its fencing token), on the
// master of its slot; the multi-lock adds that a hold it returns held every
// part, each valid until at least ValidUntil. A failover of one master can
// lose the parts it held, as it can lose any lock: the hold's context ends
// when one part is known lost.
//
// Redlock clients (NewRedlock) are allowed: each part is then a Redlock
// lock of its name, held by a quorum of nodes; Lock.Tokens of each part
// (MultiHold.Locks) gives its nodes' tokens.
type MultiLock struct {
	c     *Client
	names []string // one per key, in key order
}

// MultiLock returns the multi-lock of the mutexes called names.
func (c *Client) MultiLock(names ...string) *MultiLock {
	type named struct{ key, name string }
	ks := make([]named, len(names))
	for i, n := range names {
		ks[i] = named{c.keys(n)[0], n}
	}
	slices.SortStableFunc(ks, func(a, b named) int { return cmp.Compare(a.key, b.key) })
	ks = slices.CompactFunc(ks, func(a, b named) bool { return a.key == b.key })
	m := &MultiLock{c: c, names: make([]string, len(ks))}
	for i, k := range ks {
		m.names[i] = k.name
	}
	return m
}

// Names returns the names of the mutexes, in the order they are taken:
// that of their keys, each lock once.
func (m *MultiLock) Names() []string { return slices.Clone(m.names) }

// TryLock takes every mutex of m if each is free and nobody waits for it,
// without waiting; otherwise it holds none of them when it returns (a part
// whose acquisition failed with a Redis error is released in the
// background, as by Client.TryLock). Its error names the first mutex it
// could not take, and matches ErrNotObtained when that one was taken.
// Options apply to every part, as for Client.TryLock.
func (m *MultiLock) TryLock(ctx context.Context, opts ...LockOption) (*MultiHold, error) {
	if err := m.check(opts); err != nil {
		return nil, err
	}
	locks := make([]*Lock, 0, len(m.names))
	for _, name := range m.names {
		l, err := m.c.TryLock(ctx, name, opts...)
		if err != nil {
			releaseParts(ctx, locks)
			return nil, partError(name, err)
		}
		locks = append(locks, l)
	}
	return newMultiHold(m.c, locks), nil
}

// Lock takes every mutex of m, waiting in line for each in turn (see
// Client.Lock), until it holds them all or ctx ends; on failure it holds
// none of them when it returns (its error names the mutex it was waiting
// for, and matches ErrNotObtained and ctx.Err() when ctx ended). The parts
// it holds while it waits for the next ones are renewed by their watchdogs.
// When one of them is lost meanwhile, Lock releases them all and starts
// over, in order: a part with a fixed lease (WithTTL) that runs out while
// Lock waits for the next is lost too, so give it a lease longer than the
// wait, or keep the watchdog.
func (m *MultiLock) Lock(ctx context.Context, opts ...LockOption) (*MultiHold, error) {
	if err := m.check(opts); err != nil {
		return nil, err
	}
	for {
		h, err := m.lockOnce(ctx, opts)
		if h != nil || err != nil {
			return h, err
		}
	}
}

// Do takes every mutex of m (Lock), runs fn while holding them and releases
// them, as Client.Do: fn's context ends when any part is lost, and the
// error matches ErrLost when one was lost during fn.
func (m *MultiLock) Do(ctx context.Context, fn func(ctx context.Context) error, opts ...LockOption) error {
	h, err := m.Lock(ctx, opts...)
	if err != nil {
		return err
	}
	return do(ctx, h, fn)
}

// errPartLost ends a multi-lock's wait for its next part when a part it
// holds is lost.
var errPartLost = errors.New("lock: a part of the multi-lock was lost")

// lockOnce makes one pass of Lock over the names. It returns neither a
// hold nor an error when a part was lost during the pass: Lock starts over.
func (m *MultiLock) lockOnce(ctx context.Context, opts []LockOption) (*MultiHold, error) {
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	locks := make([]*Lock, 0, len(m.names))
	stops := make([]func() bool, 0, len(m.names))
	stopAll := func() {
		for _, s := range stops {
			s()
		}
		stops = stops[:0]
	}
	defer stopAll()
	for _, name := range m.names {
		l, err := m.c.Lock(wctx, name, opts...)
		if err != nil {
			stopAll()
			releaseParts(ctx, locks)
			if ctx.Err() == nil && errors.Is(context.Cause(wctx), errPartLost) {
				return nil, nil
			}
			return nil, partError(name, err)
		}
		locks = append(locks, l)
		stops = append(stops, context.AfterFunc(l.Context(), func() { cancel(errPartLost) }))
	}
	stopAll()
	now := time.Now()
	for _, l := range locks {
		if l.Context().Err() != nil || !now.Before(l.ValidUntil()) {
			releaseParts(ctx, locks)
			return nil, nil
		}
	}
	return newMultiHold(m.c, locks), nil
}

// check refuses a multi-lock of no names, and options that no part would
// accept.
func (m *MultiLock) check(opts []LockOption) error {
	if len(m.names) == 0 {
		return fmt.Errorf("%w: a multi-lock of no names", ErrOption)
	}
	_, err := config(opts)
	return err
}

// partError is the error of a multi-lock that could not take name.
func partError(name string, err error) error {
	return fmt.Errorf("%w (multi-lock, at %q)", err, name)
}

// releaseParts unlocks the parts a failed multi-lock took, last first, even
// when ctx has ended.
func releaseParts(ctx context.Context, locks []*Lock) {
	if len(locks) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout(locks[0].lease))
	defer cancel()
	for _, l := range slices.Backward(locks) {
		_ = l.Unlock(ctx)
	}
}

// MultiHold is a held MultiLock: a hold of each of its mutexes. Its methods
// are safe for concurrent use.
type MultiHold struct {
	locks  []*Lock // in the MultiLock's order
	ctx    context.Context
	cancel context.CancelCauseFunc
	stops  []func() bool
}

func newMultiHold(c *Client, locks []*Lock) *MultiHold {
	h := &MultiHold{locks: locks}
	h.ctx, h.cancel = context.WithCancelCause(c.ctx)
	for _, l := range locks {
		lctx, name := l.Context(), l.name
		h.stops = append(h.stops, context.AfterFunc(lctx, func() {
			h.cancel(fmt.Errorf("%q: %w", name, context.Cause(lctx)))
		}))
	}
	return h
}

// Locks returns the hold of each mutex, in the MultiLock's order (see
// MultiLock.Names): each with its name (Key), fencing token (Token, and
// Tokens with Redlock), lease and context. Unlock the MultiHold, not them.
func (h *MultiHold) Locks() []*Lock { return slices.Clone(h.locks) }

// Tokens returns the fencing token of each mutex, by name: a resource
// guarded by several of them checks each token against the largest it has
// seen for that name.
func (h *MultiHold) Tokens() map[string]int64 {
	m := make(map[string]int64, len(h.locks))
	for _, l := range h.locks {
		m[l.name] = l.token
	}
	return m
}

// Context returns a context that ends when any part is known lost (its
// cause names the part and wraps ErrLost), when Unlock is called (cause
// context.Canceled), or when the Client is closed (ErrClosed).
func (h *MultiHold) Context() context.Context { return h.ctx }

// Done is short for Context().Done().
func (h *MultiHold) Done() <-chan struct{} { return h.ctx.Done() }

// ValidUntil returns the earliest ValidUntil of the parts: before it, every
// part is surely held (by this process's clock). It is the zero time once
// any part was released or lost.
func (h *MultiHold) ValidUntil() time.Time {
	var first time.Time
	for i, l := range h.locks {
		if v := l.ValidUntil(); i == 0 || v.Before(first) {
			first = v
		}
	}
	return first
}

// Unlock releases every part, last first; its error joins those of the
// parts, each naming its mutex (ErrNotHeld for a part no longer held).
// Calling it again is harmless: each part then returns ErrNotHeld.
func (h *MultiHold) Unlock(ctx context.Context) error {
	h.cancel(context.Canceled)
	for _, s := range h.stops {
		s()
	}
	var errs []error
	for _, l := range slices.Backward(h.locks) {
		if err := l.Unlock(ctx); err != nil {
			errs = append(errs, fmt.Errorf("%q: %w", l.name, err))
		}
	}
	return errors.Join(errs...)
}

func (h *MultiHold) holdLease() time.Duration { return h.locks[0].lease }
