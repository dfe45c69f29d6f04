package lock

import (
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

// LockOption configures one acquisition.
type LockOption func(*lockConfig)

type lockConfig struct {
	lease    time.Duration
	watchdog bool
	retry    RetryStrategy
	owner    string
	metadata string
}

// WithTTL gives the lock a fixed lease (at least 10 ms): no watchdog renews
// it; it expires ttl after acquisition unless extended with Lock.Extend,
// and its context ends when the lease runs out. Default: a watchdog with a
// 30 s lease.
func WithTTL(ttl time.Duration) LockOption {
	return func(o *lockConfig) { o.lease, o.watchdog = ttl, false }
}

// WithWatchdog sets the lease (at least 10 ms) that the watchdog renews,
// every third of it, while the lock is held; a crashed holder's lock expires
// within one lease. Default: 30 s (Redisson's lockWatchdogTimeout).
func WithWatchdog(lease time.Duration) LockOption {
	return func(o *lockConfig) { o.lease, o.watchdog = lease, true }
}

// WithRetry sets how long Lock waits between attempts when no release
// message wakes it, and how many attempts it makes (see RetryStrategy).
// TryLock ignores it. Default: DefaultRetry(): attempts until ctx ends.
func WithRetry(s RetryStrategy) LockOption {
	return func(o *lockConfig) { o.retry = s }
}

// WithReentrant makes the lock reentrant for owner: while owner holds it,
// acquiring it again with the same owner succeeds and adds a hold; the lock
// is free once every hold is released. The owner identifies the holder
// across calls and processes (a request ID, a job ID); an owner of "" means
// not reentrant. Default: not reentrant.
func WithReentrant(owner string) LockOption {
	return func(o *lockConfig) { o.owner = owner }
}

// WithMetadata stores a string with the lock (field "m" of the lock hash),
// for people looking at Redis: who holds it and why. Default: none.
func WithMetadata(md string) LockOption {
	return func(o *lockConfig) { o.metadata = md }
}
