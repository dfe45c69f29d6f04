package lock

import (
	"context"
	"fmt"
	"strconv"
)

// Semaphore is a distributed counting semaphore: at most permits holders of
// a name at once, each holding a permit with a lease (a watchdog or a fixed
// TTL, as a mutex), a context that ends when the permit is lost, and a
// fencing token. Waiters wait in line, in arrival order, as for a mutex.
//
// A permit holds a slot, a number below permits that no other live permit
// holds, and a fencing token larger than that of every earlier permit.
// Fencing is per slot: a resource keeps the largest token seen for each
// slot and refuses a lower one for that slot, which refuses a stale holder
// as soon as the permit's next holder has used the resource.
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
	l, err := s.prepare(opts)
	if err != nil {
		return nil, err
	}
	return s.c.try(ctx, l)
}

// Acquire takes a permit, waiting in line until one is free or ctx ends
// (see Client.Lock).
func (s *Semaphore) Acquire(ctx context.Context, opts ...LockOption) (*Lock, error) {
	l, err := s.prepare(opts)
	if err != nil {
		return nil, err
	}
	return s.c.wait(ctx, l)
}

func (s *Semaphore) prepare(opts []LockOption) (*Lock, error) {
	cfg, err := config(opts)
	switch {
	case err != nil:
		return nil, err
	case s.permits < 1:
		return nil, fmt.Errorf("%w: semaphore %q with %d permits", ErrOption, s.name, s.permits)
	case cfg.owner != "":
		return nil, fmt.Errorf("%w: WithReentrant on semaphore %q", ErrOption, s.name)
	case s.c.redlock():
		return nil, fmt.Errorf("%w: semaphore %q on Redlock: semaphores need a single Redis", ErrOption, s.name)
	}
	return s.c.newLock(s.name, "s"+strconv.Itoa(s.permits), cfg), nil
}
