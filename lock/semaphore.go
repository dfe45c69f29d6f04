package lock

import (
	"context"
	"fmt"
	"strconv"
)

// Semaphore is a distributed counting semaphore: at most permits permits
// of a name held at once, a hold taking one (Acquire) or several at once
// (AcquireN), each hold with a lease (a watchdog or a fixed TTL, as a
// mutex), a context that ends when the hold is lost, and a fencing token.
// Waiters wait in line, in arrival order, as for a mutex.
//
// A permit holds a slot, a number below permits that no other live permit
// holds; a hold of n permits holds n slots. Every hold has a fencing token
// larger than that of every earlier hold, whatever its slots. Fencing is
// per slot: a resource keeps the largest token seen for each slot and
// refuses a lower one for that slot, which refuses a stale holder as soon
// as the slot's next holder has used the resource. A hold of n permits
// fences each of its slots with its one token.
//
// The line is strictly first come, first served: a waiter for n permits
// at its head is not overtaken by later waiters for fewer, even while
// enough permits are free for them (Redisson's RSemaphore lets them
// through, which can starve a large request for ever); the permits freed
// meanwhile stay free until it fits. A release gives the permits it frees
// to the waiters at the head of the line, in order, as long as each fits.
//
// All users of a name must agree on permits: an acquisition with another
// number fails with ErrKind while the semaphore is held. Semaphores need a
// single Redis (standalone, Sentinel or Cluster), not Redlock.
type Semaphore struct {
	c       *Client
	name    string
	permits int
}

// Semaphore returns the semaphore called name with the given number of
// permits (at least 1). Names are shared with mutexes and read-write
// locks: a name is one lock.
func (c *Client) Semaphore(name string, permits int) *Semaphore {
	return &Semaphore{c: c, name: name, permits: permits}
}

// TryAcquire takes a permit if one is free and nobody waits, without
// waiting. The Lock it returns is the permit: Slot, Token, Context,
// Extend, Unlock. Options as for a mutex, but WithReentrant is refused.
func (s *Semaphore) TryAcquire(ctx context.Context, opts ...LockOption) (*Lock, error) {
	return s.TryAcquireN(ctx, 1, opts...)
}

// Acquire takes a permit, waiting in line until one is free or ctx ends
// (see Client.Lock).
func (s *Semaphore) Acquire(ctx context.Context, opts ...LockOption) (*Lock, error) {
	return s.AcquireN(ctx, 1, opts...)
}

// TryAcquireN takes n permits at once, all or none, if n are free and
// nobody waits, without waiting. The Lock it returns holds them all: its
// Slots, one Token, one lease (renewed by one watchdog, moved by Extend),
// one Context; Unlock releases them all. n must be between 1 and the
// semaphore's permits: otherwise the error matches ErrOption.
func (s *Semaphore) TryAcquireN(ctx context.Context, n int, opts ...LockOption) (*Lock, error) {
	l, err := s.prepare(n, opts)
	if err != nil {
		return nil, err
	}
	return s.c.try(ctx, l)
}

// AcquireN takes n permits at once, all or none, waiting in line until n
// are free or ctx ends (see TryAcquireN and Client.Lock). Its place in
// line is kept while fewer than n are free: waiters behind it wait too.
func (s *Semaphore) AcquireN(ctx context.Context, n int, opts ...LockOption) (*Lock, error) {
	l, err := s.prepare(n, opts)
	if err != nil {
		return nil, err
	}
	return s.c.wait(ctx, l)
}

// Release releases the hold of this semaphore whose ID (Lock.ID) is id,
// from any client of any process, as its Unlock would: its permits go to
// the waiters that now fit. It is how a hold is given back by another
// process than the one that took it (Redisson's RPermitExpirableSemaphore):
// the holder passes its ID on, with the work. The ID names one
// acquisition, so Release drops that hold and never another; when the
// semaphore has no live hold of that ID (released already, by Unlock or
// Release, or expired), it returns ErrNotHeld and changes nothing.
//
// The holder is not told at once: its hold is lost (Context ends with a
// cause wrapping ErrLost, later Extend and Unlock return ErrNotHeld) at
// its next renewal, within a third of the lease under a watchdog, or when
// a fixed lease (WithTTL) runs out. Until then it may still believe it
// holds the permits and write; the per-slot fencing token is what makes
// the resource refuse it once a later holder of one of its slots has used
// it, as for any holder whose hold has gone.
func (s *Semaphore) Release(ctx context.Context, id string) error {
	if s.c.redlock() {
		return fmt.Errorf("%w: semaphore %q on Redlock: semaphores need a single Redis", ErrOption, s.name)
	}
	k := s.c.keys(s.name)
	v, err := run(ctx, s.c.nodes[0], releaseIDScript, k[:], []string{id, s.c.chanbase})
	switch {
	case err != nil:
		return err
	case v == 0:
		return ErrNotHeld
	}
	return nil
}

func (s *Semaphore) prepare(n int, opts []LockOption) (*Lock, error) {
	cfg, err := config(opts)
	switch {
	case err != nil:
		return nil, err
	case s.permits < 1:
		return nil, fmt.Errorf("%w: semaphore %q with %d permits", ErrOption, s.name, s.permits)
	case n < 1 || n > s.permits:
		return nil, fmt.Errorf("%w: %d permits of semaphore %q, which has %d", ErrOption, n, s.name, s.permits)
	case cfg.owner != "":
		return nil, fmt.Errorf("%w: WithReentrant on semaphore %q", ErrOption, s.name)
	case s.c.redlock():
		return nil, fmt.Errorf("%w: semaphore %q on Redlock: semaphores need a single Redis", ErrOption, s.name)
	}
	return s.c.newLock(s.name, semSpec(s.permits, n), cfg), nil
}

// semSpec is the spec of a hold of n of permits (see scripts/core.lua).
func semSpec(permits, n int) string {
	spec := "s" + strconv.Itoa(permits)
	if n > 1 {
		spec += "x" + strconv.Itoa(n)
	}
	return spec
}
