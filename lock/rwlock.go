package lock

import (
	"context"
	"fmt"
)

// RWLock is a distributed read-write lock: any number of read holds at
// once, or one write hold. Each hold has a lease (a watchdog or a fixed
// TTL), a context that ends when it is lost, and a fencing token larger
// than that of every earlier hold. Waiters wait in line in arrival order:
// a read acquisition waits behind a waiting writer (writers do not starve),
// and a release lets in every reader at the head of the line at once.
//
// Fencing: a resource checks write holds' tokens as a mutex's (refuse a
// token below the largest seen). A read hold's token is larger than that of
// every earlier write hold; a resource may refuse reads below the largest
// write token it has seen.
//
// Holds are not reentrant: a holder that asks again waits like anyone else
// (a read hold asked while holding a write hold waits for itself). Read-write
// locks need a single Redis (standalone, Sentinel or Cluster), not Redlock.
type RWLock struct {
	c    *Client
	name string
}

// RWLock returns the read-write lock called name. Names are shared with
// mutexes and semaphores: a name is one lock.
func (c *Client) RWLock(name string) *RWLock {
	return &RWLock{c: c, name: name}
}

// TryLock takes a write hold if the lock is free and nobody waits, without
// waiting.
func (rw *RWLock) TryLock(ctx context.Context, opts ...LockOption) (*Lock, error) {
	l, err := rw.prepare("w", opts)
	if err != nil {
		return nil, err
	}
	return rw.c.try(ctx, l)
}

// Lock takes a write hold, waiting in line (see Client.Lock).
func (rw *RWLock) Lock(ctx context.Context, opts ...LockOption) (*Lock, error) {
	l, err := rw.prepare("w", opts)
	if err != nil {
		return nil, err
	}
	return rw.c.wait(ctx, l)
}

// TryRLock takes a read hold if no writer holds or waits, without waiting.
func (rw *RWLock) TryRLock(ctx context.Context, opts ...LockOption) (*Lock, error) {
	l, err := rw.prepare("r", opts)
	if err != nil {
		return nil, err
	}
	return rw.c.try(ctx, l)
}

// RLock takes a read hold, waiting in line (see Client.Lock).
func (rw *RWLock) RLock(ctx context.Context, opts ...LockOption) (*Lock, error) {
	l, err := rw.prepare("r", opts)
	if err != nil {
		return nil, err
	}
	return rw.c.wait(ctx, l)
}

func (rw *RWLock) prepare(spec string, opts []LockOption) (*Lock, error) {
	cfg, err := config(opts)
	switch {
	case err != nil:
		return nil, err
	case cfg.owner != "":
		return nil, fmt.Errorf("%w: WithReentrant on read-write lock %q", ErrOption, rw.name)
	case rw.c.redlock():
		return nil, fmt.Errorf("%w: read-write lock %q on Redlock: read-write locks need a single Redis", ErrOption, rw.name)
	}
	return rw.c.newLock(rw.name, spec, cfg), nil
}
