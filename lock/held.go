package lock

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Lock is a held lock: a hold of a mutex, a semaphore permit, or a read or
// write hold of a read-write lock. Its methods are safe for concurrent use.
type Lock struct {
	c    *Client
	name string
	spec string    // what the hold is (see scripts/core.lua)
	keys [4]string // the lock, fence counter, waiters, waiters' requests
	tok  string    // hold token: this acquisition and no other
	lockConfig
	leaseArg string    // lease in ms, for the scripts
	placeArg string    // placeTTL(lease) in ms, for the scripts
	token    int64     // fencing token
	tokens   []int64   // Redlock: the token of each node, 0 where not acquired
	slots    []int     // semaphore hold: its slots, lowest first
	acquired time.Time // when the last acquire request was sent
	kv       [8]string // arguments of the acquire script
	co       *cohort   // the cohort whose Redis hold this is (see cohort.go)
	passes   int       // how many more times the cohort may pass it on
	polled   int64     // waiting: no token above it was issued before the last poll (see waitFor)
	short    bool      // taken with a short call: released with one first (see acquire)

	mu         sync.Mutex
	renewLease time.Duration // the watchdog's lease: lease, until Extend sets it
	validUntil time.Time     // the lease surely still runs before this
	timer      *time.Timer   // the watchdog's next renewal
	deadline   *time.Timer   // the lease's end; under a watchdog, made by the first renewal
	lastErr    error         // of the last failed renewal
	stopped    bool          // no more renewals: Unlock was called, or the lock was lost
	released   bool          // Unlock got its answer: later Unlocks stay local
	cause      error         // why the context ended, nil while it runs
	ctx        context.Context
	cancel     context.CancelCauseFunc
}

// arm starts the watchdog, or the timer of a fixed lease's end.
func (l *Lock) arm() {
	l.mu.Lock()
	l.renewLease = l.lease
	if l.watchdog {
		l.timer = time.AfterFunc(untilRenewal(l.validUntil, l.lease), l.renew)
	} else {
		l.deadline = time.AfterFunc(time.Until(l.validUntil), l.expire)
	}
	l.mu.Unlock()
}

// untilRenewal is how long the watchdog waits to renew a lease that is
// valid until validUntil: until a third of it has run from its start
// (validUntil is start + lease - drift), which may be now or past, for a
// waiter given the lock earlier or a renewal that took long. Counting from
// the start, not from the answer, keeps the renewals every third of the
// lease however slowly Redis answers: counted from the answer, each
// renewal's round trip added to the period, and round trips of more than a
// third of the lease (a loaded machine) let the lease run out between two
// renewals that each succeeded.
func untilRenewal(validUntil time.Time, lease time.Duration) time.Duration {
	return max(time.Until(validUntil.Add(drift(lease)))-lease*2/3, 0)
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

// ID returns the id of the hold in Redis (Inspect's Hold.ID): the holding
// client's id, '.', a number; one acquisition's and no other's. A
// semaphore hold can be released by it from any process (Semaphore.Release).
// A mutex hold passed on within a cohort (see Client.Lock) has the id of
// the Redis hold it shares.
func (l *Lock) ID() string { return l.tok }

// Token returns the fencing token: it is larger than the token of every
// earlier holder of this name (see the package documentation for the
// conditions). Hand it to the protected resource with every write, and let
// the resource refuse a token lower than one it has seen. A reentrant
// acquisition returns the token of the hold it joins. For Redlock it is the
// largest of the nodes' tokens, which is not ordered across holders: see
// Tokens.
func (l *Lock) Token() int64 { return l.token }

// Tokens returns the fencing token of each node: for a single Redis, one;
// for Redlock, one per node (0 where the lock was not acquired, or not
// awaited: a node that had not answered when a quorum had). Any two
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

// Slot returns the slot of a semaphore permit: a number below the
// semaphore's permits, held by no other live permit. A resource fences
// permits per slot: it keeps the largest token seen for each slot. For a
// hold of several permits (Semaphore.AcquireN) it is the lowest of its
// slots (see Slots). It is 0 for other locks.
func (l *Lock) Slot() int {
	if l.slots == nil {
		return 0
	}
	return l.slots[0]
}

// Slots returns the slots of a semaphore hold, lowest first: one per
// permit it holds, each held by no other live permit. The hold's one
// fencing token (Token) fences each of them: it is larger than the token
// of every earlier holder of any slot. It is nil for other locks.
func (l *Lock) Slots() []int { return slices.Clone(l.slots) }

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
	if lost != nil && l.co != nil {
		l.c.dropLost(l)
	}
	if h := l.c.hooks.Lost; h != nil && lost != nil {
		h(l.name, lost)
	}
}

// renew is the watchdog: it runs every third of the lease while the lock is
// held (counted from the start of the lease it renews: see untilRenewal),
// and more often while renewals fail. The lease timer, not the
// renewal, declares the lock lost when the lease runs out: a renewal may
// hang longer than that (go-redis ignores context deadlines by default).
func (l *Lock) renew() {
	l.mu.Lock()
	if l.stopped || l.c.ctx.Err() != nil {
		l.mu.Unlock()
		return
	}
	deadline, lease := l.validUntil, l.renewLease
	if l.deadline == nil {
		l.deadline = time.AfterFunc(time.Until(deadline), l.expire)
	}
	l.mu.Unlock()

	ctx, cancel := context.WithDeadline(l.c.ctx, deadline)
	start := time.Now()
	st, err := l.c.extend(ctx, l, lease)
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
		if lease == l.renewLease { // else Extend changed it meanwhile, and set both
			l.validUntil = start.Add(lease - drift(lease))
			l.deadline.Reset(time.Until(l.validUntil))
			l.timer.Reset(untilRenewal(l.validUntil, lease))
		}
	case refused:
		lost = l.lose(fmt.Errorf("%w: renewal refused: the lock expired or was taken over", ErrLost))
	default:
		l.lastErr = err
		if left := time.Until(l.validUntil); left > 0 {
			l.timer.Reset(min(max(l.renewLease/10, 10*time.Millisecond), left))
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

// Extend sets this hold's lease to ttl (at least 10 ms) from now. With a
// fixed lease (WithTTL) it moves the lease's end, earlier too. Under a
// watchdog it renews at once and becomes the watchdog's lease: renewals go
// on with ttl, every third of it. It never changes another hold's lease (a
// reentrant owner's others, other permits, other readers). It returns
// ErrNotHeld when the lock is no longer held, in which case the lock is
// lost.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	ttl = max(ttl, minLease)
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
		} else if !l.watchdog {
			l.deadline = time.AfterFunc(time.Until(l.validUntil), l.expire)
		}
		if l.watchdog {
			l.renewLease = ttl
			l.timer.Reset(untilRenewal(l.validUntil, ttl))
		}
		return nil
	case refused:
		lost = l.lose(fmt.Errorf("%w: extension refused: the lock expired or was taken over", ErrLost))
		return ErrNotHeld
	}
	return err
}

// TTL returns the lease left on the server for this hold, or ErrNotHeld.
func (l *Lock) TTL(ctx context.Context) (time.Duration, error) {
	l.mu.Lock()
	gone := l.released && l.co != nil // passed on: the Redis hold is another's now
	l.mu.Unlock()
	if gone {
		return 0, ErrNotHeld
	}
	return l.c.pttl(ctx, l)
}

// Unlock releases the hold: the watchdog stops first, so no renewal follows
// the release, and the context ends. The release gives the lock to the
// waiters in line; in a cohort (see Client.Lock), the hold is passed on to
// the next goroutine of it instead, while it is valid, without Redis. It
// returns ErrNotHeld when the lock was no longer held; calling it again is
// harmless. On a Redis error the lock may or may not be released; calling
// Unlock again retries, and the lock expires within its lease in any case.
func (l *Lock) Unlock(ctx context.Context) error {
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return ErrNotHeld
	}
	valid := !l.stopped && time.Now().Before(l.validUntil)
	l.stopped = true
	l.stopTimers()
	l.end(context.Canceled)
	yield := false
	if l.co != nil {
		// decided under l.mu: once the hold is passed on, its Redis hold is
		// the next holder's, and this one must not touch it
		var passed bool
		if passed, yield = l.c.passOn(l, valid); passed {
			l.released = true
			l.mu.Unlock()
			if h := l.c.hooks.Release; h != nil {
				h(l.name, time.Since(l.acquired), nil)
			}
			return nil
		}
	}
	l.mu.Unlock()

	st, err := l.c.release(ctx, l, yield)
	if h := l.c.hooks.Release; h != nil {
		h(l.name, time.Since(l.acquired), err)
	}
	if st != failed {
		l.mu.Lock()
		l.released = true
		l.mu.Unlock()
	}
	return err
}
