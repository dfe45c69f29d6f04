package lock

import (
	"fmt"
	"strings"
	"time"
)

// Defaults of the options.
const (
	DefaultPrefix = "lock:"
	DefaultLease  = 30 * time.Second
)

// Option configures a Client.
type Option func(*Client)

// WithPrefix sets the prefix of every key and channel the client uses.
// It must not contain '{' or '}'. Default: "lock:".
func WithPrefix(prefix string) Option {
	if strings.ContainsAny(prefix, "{}") {
		panic("lock: WithPrefix: prefix must not contain '{' or '}'")
	}
	return func(c *Client) { c.prefix = prefix }
}

// WithHooks sets functions the client calls on acquisitions, renewals,
// losses and releases, for metrics or logs (see package lockprom).
// Default: no hooks.
func WithHooks(h Hooks) Option {
	return func(c *Client) { c.hooks = h }
}

// LockOption configures one acquisition: of a mutex, a semaphore permit, or
// a read or write hold of a read-write lock.
//
// The fast path is a plain mutex taken with the defaults (a lease set by
// WithWatchdog is fine): goroutines of one client that Lock it form a
// cohort, and a hold is passed on among them in-process, without Redis
// (see Client.Lock). WithTTL, WithMetadata, WithRetry and WithReentrant
// each leave it: such a Lock waits in the Redis line on its own, two round
// trips per acquisition under contention (issue 25 measured 429 holds/s
// off the fast path against 723 on it, 4 processes of 4 goroutines, 1 ms
// holds). Use them where their meaning is needed, not by habit.
type LockOption func(*lockConfig)

type lockConfig struct {
	lease    time.Duration
	watchdog bool
	leaseBy  uint8 // which of WithTTL, WithWatchdog set the lease: a conflict is refused
	retry    RetryStrategy
	retrySet bool // by WithRetry
	owner    string
	metadata string
}

// WithTTL gives the lock a fixed lease (at least 10 ms): no watchdog renews
// it; it expires ttl after acquisition unless extended with Lock.Extend,
// and its context ends when the lease runs out. It conflicts with
// WithWatchdog: given both, TryLock and Lock return an error. It leaves the
// fast path (see LockOption): a fixed lease runs from its own acquisition,
// and cannot be passed on. Default: a watchdog with a 30 s lease.
func WithTTL(ttl time.Duration) LockOption {
	return func(o *lockConfig) {
		o.lease, o.watchdog = ttl, false
		o.leaseBy |= byTTL
	}
}

// WithWatchdog sets the lease (at least 10 ms) that the watchdog renews,
// every third of it, while the lock is held; a crashed holder's lock expires
// within one lease. It conflicts with WithTTL: given both, TryLock and Lock
// return an error. Default: 30 s (Redisson's lockWatchdogTimeout).
func WithWatchdog(lease time.Duration) LockOption {
	return func(o *lockConfig) {
		o.lease, o.watchdog = lease, true
		o.leaseBy |= byWatchdog
	}
}

// WithRetry sets when Lock gives up: after the retries of s (see
// RetryStrategy). On one Redis a waiter waits in line and is given the lock,
// so retries send nothing; with Redlock each retry is an attempt. NoRetry
// makes Lock a TryLock. TryLock ignores it. Given at all, even as
// DefaultRetry(), it leaves the fast path (see LockOption); to bound the
// wait on one Redis, a context deadline keeps it. Default: DefaultRetry():
// wait until ctx ends.
func WithRetry(s RetryStrategy) LockOption {
	return func(o *lockConfig) { o.retry, o.retrySet = s, true }
}

// WithReentrant makes a mutex reentrant for owner: while owner holds it,
// acquiring it again with the same owner succeeds at once (ahead of any
// waiter) and adds a hold with a lease of its own; the lock is free once
// every hold is released or expired, and no hold shortens another's lease.
// The owner identifies the holder across calls and processes (a request
// ID, a job ID); an owner of "" means not reentrant. Semaphores and
// read-write locks refuse it. It leaves the fast path (see LockOption).
// Default: not reentrant.
//
// The owner string is all it takes: any goroutine, client or process that
// passes the same owner while it holds the lock gets in at once, beside the
// holder, with the same fencing token, so neither the lock nor a fencing
// resource keeps them apart. The lock does not bind the owner to a client
// or check who presents it. Use an owner that only the holder knows, made
// for the one piece of work the lock protects (a random job ID), never a
// constant, a user name or anything two workers may share.
func WithReentrant(owner string) LockOption {
	return func(o *lockConfig) { o.owner = owner }
}

// WithMetadata stores a string with the hold, for people and tools looking
// at the lock (Client.Inspect): who holds it and why. Default: none.
func WithMetadata(md string) LockOption {
	return func(o *lockConfig) { o.metadata = md }
}

const (
	byTTL = 1 << iota
	byWatchdog
)

// config applies opts to the defaults.
func config(opts []LockOption) (lockConfig, error) {
	cfg := lockConfig{lease: DefaultLease, watchdog: true, retry: defaultRetry}
	if len(opts) > 0 {
		// on the heap only when there are options: o may keep its argument
		c := new(lockConfig)
		*c = cfg
		for _, o := range opts {
			o(c)
		}
		cfg = *c
	}
	if cfg.leaseBy == byTTL|byWatchdog {
		return cfg, fmt.Errorf("%w: WithTTL and WithWatchdog both set the lease: give one", ErrOption)
	}
	cfg.lease = max(cfg.lease, minLease)
	return cfg, nil
}
