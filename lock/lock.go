package lock

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Client takes and releases locks on one Redis (New) or on a quorum of
// independent Redis nodes (NewRedlock). It is safe for concurrent use.
//
// A client owns at most one pub/sub subscription per node, opened by the
// first Lock that has to wait, through which every waiter of the process is
// woken. Close ends it.
type Client struct {
	nodes  []*node
	quorum int

	prefix string
	hooks  Hooks

	id  string        // random prefix of hold tokens
	seq atomic.Uint64 // hold token counter

	waiters waiters

	ctx    context.Context // cancelled by Close with cause ErrClosed
	cancel context.CancelCauseFunc
	mu     sync.Mutex // guards closed and subbed
	closed bool
	subbed bool
	wg     sync.WaitGroup // subscriptions, and releases of unknown acquisitions
}

type node struct {
	r Redis
}

// New returns a client that keeps its locks on r.
func New(r Redis, opts ...Option) *Client {
	return newClient([]Redis{r}, opts)
}

// NewRedlock returns a client that runs the Redlock algorithm over nodes,
// independent Redis servers (not replicas of one another, not one Cluster):
// a lock is held when a majority of them granted it within its validity,
// lease - elapsed - drift, where drift is 1% of the lease plus 2 ms. Requests
// go to all nodes in parallel; a failed acquisition is released everywhere.
//
// Every node issues its own fencing token, so one number cannot order
// Redlock holders: Lock.Token returns the largest, for logs, and Lock.Tokens
// returns them all, for a resource that fences with them (see Tokens).
// Nodes are not Redis Cluster nodes: a Cluster is one node here.
func NewRedlock(nodes []Redis, opts ...Option) *Client {
	if len(nodes) == 0 {
		panic("lock: NewRedlock needs at least one node")
	}
	return newClient(nodes, opts)
}

func newClient(rs []Redis, opts []Option) *Client {
	c := &Client{
		quorum: len(rs)/2 + 1,
		prefix: DefaultPrefix,
	}
	for _, r := range rs {
		c.nodes = append(c.nodes, &node{r: r})
	}
	for _, o := range opts {
		o(c)
	}
	var b [12]byte
	rand.Read(b[:])
	c.id = base64.RawURLEncoding.EncodeToString(b[:]) + "."
	c.waiters.q = make(map[string][]*waiter)
	c.ctx, c.cancel = context.WithCancelCause(context.Background())
	return c
}

// Close stops the client: the subscriptions end, waiting Lock calls return
// ErrClosed, and watchdogs stop renewing, so held locks expire within their
// lease; their contexts end with cause ErrClosed. Unlock still works.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.cancel(ErrClosed)
	c.wg.Wait()
	return nil
}

// newLock prepares an acquisition of name; it allocates little because it
// runs for every lock.
func (c *Client) newLock(name string, opts []LockOption) *Lock {
	l := &Lock{c: c, name: name, lockConfig: lockConfig{lease: DefaultLease, watchdog: true, retry: defaultRetry}}
	for _, o := range opts {
		o(&l.lockConfig)
	}
	l.lease = max(l.lease, minLease)
	l.leaseArg = defaultLeaseArg
	if l.lease != DefaultLease {
		l.leaseArg = ms(l.lease)
	}
	// one allocation for both keys: the lock key is a prefix of the other
	if hashTagged(name) {
		l.fkey = c.prefix + name + fenceSuffix
	} else {
		l.fkey = c.prefix + "{" + name + "}" + fenceSuffix
	}
	l.rkey = l.fkey[:len(l.fkey)-len(fenceSuffix)]
	var b [64]byte
	l.tok = string(strconv.AppendUint(append(b[:0], c.id...), c.seq.Add(1), 36))
	return l
}

var defaultLeaseArg = ms(DefaultLease)

// minLease keeps the drift allowance (2 ms and more) a small part of the
// lease.
const minLease = 10 * time.Millisecond

// TryLock takes the lock called name if it is free, without waiting. It
// returns an error matching ErrNotObtained when someone else holds it, or
// the Redis error.
func (c *Client) TryLock(ctx context.Context, name string, opts ...LockOption) (*Lock, error) {
	if c.ctx.Err() != nil {
		return nil, ErrClosed
	}
	l := c.newLock(name, opts)
	_, err := c.acquire(ctx, l, c.mark(l.rkey, nil, false))
	if h := c.hooks.Acquire; h != nil {
		h(name, time.Since(l.acquired), err)
	}
	if err != nil {
		return nil, err
	}
	l.arm()
	return l, nil
}

// Lock takes the lock called name, waiting until it is free or ctx ends.
// Waiters are woken by a message that the releasing client publishes; a
// jittered poll (see WithRetry) covers a missed message and a holder that
// died. When ctx ends first, the error matches both ErrNotObtained and
// ctx.Err(); when the retry strategy gives up, ErrNotObtained.
//
// Waiters of one client queue in arrival order and are handed the lock one
// after the other, without it ever being free, while no other client waits
// for it. Between clients Lock is not fair: whoever asks first after a
// release gets it.
func (c *Client) Lock(ctx context.Context, name string, opts ...LockOption) (*Lock, error) {
	start := time.Now()
	l, err := c.lock(ctx, name, opts)
	if h := c.hooks.Acquire; h != nil {
		h(name, time.Since(start), err)
	}
	return l, err
}

func (c *Client) lock(ctx context.Context, name string, opts []LockOption) (*Lock, error) {
	if c.ctx.Err() != nil {
		return nil, ErrClosed
	}
	l := c.newLock(name, opts)
	c.subscribe()
	var (
		hint  time.Duration
		err   error = ErrNotObtained
		raced bool
		w     *waiter
	)
	if c.waiters.others(l.rkey, nil) && l.retry.Backoff(1) > 0 {
		// Goroutines of this client wait already: the lock is held, and will
		// be handed along their queue. Join it instead of trying.
		w = c.waiters.add(l)
	} else {
		seen := c.waiters.msgs.Load()
		hint, err = c.acquire(ctx, l, c.mark(l.rkey, nil, true))
		if err == nil {
			l.arm()
			return l, nil
		}
		if !errors.Is(err, ErrNotObtained) {
			return nil, err
		}
		w = c.waiters.add(l)
		// A release message that came between the attempt and the
		// registration woke nobody: try again at once.
		raced = c.waiters.msgs.Load() != seen
	}
	acquired := false
	defer func() { c.waiters.remove(w, acquired) }()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for n := 1; ; {
		if !raced {
			var tc <-chan time.Time
			if st := c.waiters.state(w); st == attempt {
				d := l.retry.Backoff(n)
				if d <= 0 {
					return nil, err
				}
				d = jitter(d)
				if hint > 0 && hint+2*time.Millisecond < d {
					// the holder's lease ends first: try right after it
					d = hint + time.Millisecond + jitter(time.Millisecond)
				}
				if timer == nil {
					timer = time.NewTimer(d)
				} else {
					timer.Reset(d)
				}
				tc = timer.C
			} // else a handoff is under way: its outcome wakes us
			select {
			case <-ctx.Done():
				if c.waiters.leave(w) {
					acquired = true
					l.arm()
					return l, nil
				}
				return nil, fmt.Errorf("%w (%w)", ErrNotObtained, ctx.Err())
			case <-c.ctx.Done():
				if c.waiters.leave(w) {
					acquired = true
					l.arm()
					return l, nil
				}
				return nil, fmt.Errorf("%w (%w)", ErrNotObtained, ErrClosed)
			case <-w.wake:
			case <-tc:
			}
		}
		raced = false
		switch c.waiters.begin(w) {
		case granted:
			acquired = true
			l.arm()
			return l, nil
		case handoff:
			continue
		}
		n++
		hint, err = c.acquire(ctx, l, c.mark(l.rkey, w, true))
		c.waiters.done(w)
		if err == nil {
			acquired = true
			l.arm()
			return l, nil
		}
		if !errors.Is(err, ErrNotObtained) {
			return nil, err
		}
	}
}

// mark tells the acquire script when to flag the lock as awaited, which
// makes its release publish a message: when the caller will wait, and also
// on success when other goroutines of this process wait for the same lock.
func (c *Client) mark(rkey string, self *waiter, waiting bool) string {
	switch {
	case c.waiters.others(rkey, self):
		return "2"
	case waiting:
		return "1"
	}
	return "0"
}

// drift bounds the clock drift between client and servers over a lease.
func drift(lease time.Duration) time.Duration { return lease/100 + 2*time.Millisecond }

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

// nodeTimeout bounds one Redlock request to one node, so that a hung node
// costs a small part of the lease.
func nodeTimeout(lease time.Duration) time.Duration {
	return min(clamp(lease/10, 50*time.Millisecond, time.Second), lease/2)
}

type result struct {
	v   int64
	err error
}

// each runs f on every node in parallel and returns the results by node.
func (c *Client) each(ctx context.Context, timeout time.Duration, f func(ctx context.Context, r Redis) (int64, error)) []result {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res := make([]result, len(c.nodes))
	var wg sync.WaitGroup
	for i, n := range c.nodes {
		wg.Go(func() { res[i].v, res[i].err = f(ctx, n.r) })
	}
	wg.Wait()
	return res
}

func (c *Client) runAll(ctx context.Context, lease time.Duration, s *script, keys, args []string) []result {
	return c.each(ctx, nodeTimeout(lease), func(ctx context.Context, r Redis) (int64, error) {
		return run(ctx, r, s, keys, args)
	})
}

// acquire runs the acquire script. On success it sets l's token and lease
// end; when the lock is taken it returns ErrNotObtained (possibly inside a
// QuorumError) and how long the holder's lease still runs.
func (c *Client) acquire(ctx context.Context, l *Lock, mark string) (time.Duration, error) {
	// l.kv saves an allocation: acquisitions of one Lock never overlap.
	// Trailing arguments that hold their default are left out.
	kv := &l.kv
	kind := l.kindArg()
	*kv = [...]string{l.rkey, l.fkey, l.tok, l.leaseArg, mark, kind, l.metadata}
	keys, args := kv[:2], kv[2:4]
	switch {
	case l.metadata != "":
		args = kv[2:7]
	case kind != "":
		args = kv[2:6]
	case mark != "0":
		args = kv[2:5]
	}
	start := time.Now()
	l.acquired = start
	if len(c.nodes) == 1 {
		v, err := run(ctx, c.nodes[0].r, acquireScript, keys, args)
		if err == nil && v <= 0 {
			err = ErrNotObtained
		}
		if h := c.hooks.Attempt; h != nil {
			h(l.name, time.Since(start), err)
		}
		if err != nil {
			if err == ErrNotObtained {
				return time.Duration(-1-v) * time.Millisecond, err
			}
			// The script may have run, and the reply been lost: undo it.
			c.undo(l)
			return 0, err
		}
		l.token = v
		l.validUntil = start.Add(l.lease - drift(l.lease))
		if !time.Now().Before(l.validUntil) {
			// granted, but too slowly to be of use
			c.releaseQuietly(ctx, l)
			return 0, ErrNotObtained
		}
		return 0, nil
	}

	res := c.runAll(ctx, l.lease, acquireScript, keys, args)
	tokens := make([]int64, len(c.nodes))
	var (
		ok    int
		bad   int // nodes in an unknown state
		token int64
		hint  time.Duration = -1
		qe                  = QuorumError{Op: "acquire", Quorum: c.quorum}
	)
	for i, r := range res {
		switch {
		case r.err != nil:
			bad++
			qe.Nodes = append(qe.Nodes, &NodeError{Node: i, Err: r.err})
		case r.v > 0:
			ok++
			token = max(token, r.v)
			tokens[i] = r.v
		default:
			qe.Nodes = append(qe.Nodes, &NodeError{Node: i, Err: ErrNotObtained})
			if d := time.Duration(-1-r.v) * time.Millisecond; hint < 0 || d < hint {
				hint = d
			}
		}
	}
	qe.OK = ok
	validUntil := start.Add(l.lease - drift(l.lease))
	var err error
	if ok < c.quorum {
		err = &qe
	} else if !time.Now().Before(validUntil) {
		qe.Nodes = append(qe.Nodes, &NodeError{Node: -1, Err: fmt.Errorf("%w: validity elapsed during acquisition", ErrNotObtained)})
		err = &qe
	}
	if h := c.hooks.Attempt; h != nil {
		h(l.name, time.Since(start), err)
	}
	if err != nil {
		if ok > 0 || bad > 0 {
			c.releaseQuietly(ctx, l)
		}
		return max(hint, 0), err
	}
	l.token = token
	l.tokens = tokens
	l.validUntil = validUntil
	return 0, nil
}

// undo releases, in the background, an acquisition whose outcome is
// unknown, so that a lost reply does not leave the lock taken for a lease.
func (c *Client) undo(l *Lock) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.wg.Go(func() {
		ctx, cancel := context.WithTimeout(c.ctx, nodeTimeout(l.lease))
		defer cancel()
		_, _, _ = c.release(ctx, l, nil, false)
	})
}

// releaseQuietly undoes a failed or useless acquisition on every node,
// even when ctx has ended.
func (c *Client) releaseQuietly(ctx context.Context, l *Lock) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), nodeTimeout(l.lease))
	defer cancel()
	_, _, _ = c.release(ctx, l, nil, false)
}

// status of an extend or release.
type status int

const (
	done    status = iota // extended or released
	refused               // not held: definitive
	failed                // unknown: transport errors
	handed                // released by handing it over to a waiter
)

// extend runs the extend script with lease.
func (c *Client) extend(ctx context.Context, l *Lock, lease time.Duration) (status, error) {
	keys := []string{l.rkey}
	args := []string{l.tok, ms(lease)}
	if l.isHash() {
		args = append(args, "h")
	}
	if len(c.nodes) == 1 {
		v, err := run(ctx, c.nodes[0].r, extendScript, keys, args)
		switch {
		case err != nil:
			return failed, err
		case v != 1:
			return refused, ErrNotHeld
		}
		return done, nil
	}
	start := time.Now()
	res := c.runAll(ctx, lease, extendScript, keys, args)
	ok, no := 0, 0
	qe := QuorumError{Op: "extend", Quorum: c.quorum}
	for i, r := range res {
		switch {
		case r.err != nil:
			qe.Nodes = append(qe.Nodes, &NodeError{Node: i, Err: r.err})
		case r.v == 1:
			ok++
		default:
			no++
			qe.Nodes = append(qe.Nodes, &NodeError{Node: i, Err: ErrNotHeld})
		}
	}
	qe.OK = ok
	switch {
	case ok >= c.quorum && time.Since(start) < lease-drift(lease):
		return done, nil
	case no > len(c.nodes)-c.quorum:
		return refused, &qe // a quorum can no longer be had
	}
	return failed, &qe
}

// release runs the release script. When next is set (single node, plain
// lock), the lock is handed over to that waiter if no other client waits,
// and release returns handed and the new holder's token; more tells whether
// others wait behind next.
func (c *Client) release(ctx context.Context, l *Lock, next *waiter, more bool) (status, int64, error) {
	kv := [...]string{l.rkey, l.fkey, l.tok, l.hashArg(), "", "", ""}
	keys, args := kv[:1], kv[2:3]
	switch {
	case next != nil:
		kv[4], kv[5] = next.lock.tok, next.lock.leaseArg
		if more {
			kv[6] = "1"
		}
		keys, args = kv[:2], kv[2:7]
	case l.isHash():
		args = kv[2:4]
	}
	if len(c.nodes) == 1 {
		v, err := run(ctx, c.nodes[0].r, releaseScript, keys, args)
		switch {
		case err != nil:
			return failed, 0, err
		case v > 2:
			return handed, v, nil
		case v == 0:
			return refused, 0, ErrNotHeld
		}
		return done, 0, nil
	}
	res := c.runAll(ctx, l.lease, releaseScript, keys, args)
	ok, no := 0, 0
	qe := QuorumError{Op: "release", Quorum: c.quorum}
	for i, r := range res {
		switch {
		case r.err != nil:
			qe.Nodes = append(qe.Nodes, &NodeError{Node: i, Err: r.err})
		case r.v == 0:
			no++
			qe.Nodes = append(qe.Nodes, &NodeError{Node: i, Err: ErrNotHeld})
		default:
			ok++
		}
	}
	qe.OK = ok
	switch {
	case ok >= c.quorum:
		return done, 0, nil
	case len(qe.Nodes) == no:
		return refused, 0, ErrNotHeld // every node answered; a quorum did not hold it
	case ok > 0 && ok+no >= c.quorum:
		// Released where it was held, and a quorum now answered that it
		// does not hold it: whatever the silent nodes hold, no quorum can.
		// A lock taken on a bare quorum (a split vote under contention),
		// one node of which then failed, is released here, not unknown.
		return done, 0, nil
	}
	return failed, 0, &qe
}

// pttl runs the ttl script: the lease left on the server.
func (c *Client) pttl(ctx context.Context, l *Lock) (time.Duration, error) {
	keys := []string{l.rkey}
	args := []string{l.tok}
	if l.isHash() {
		args = append(args, "h")
	}
	if len(c.nodes) == 1 {
		v, err := run(ctx, c.nodes[0].r, ttlScript, keys, args)
		switch {
		case err != nil:
			return 0, err
		case v == -3:
			return 0, ErrNotHeld
		}
		return time.Duration(max(v, 0)) * time.Millisecond, nil
	}
	res := c.runAll(ctx, l.lease, ttlScript, keys, args)
	var ttls []time.Duration
	no := 0
	qe := QuorumError{Op: "ttl", Quorum: c.quorum}
	for i, r := range res {
		switch {
		case r.err != nil:
			qe.Nodes = append(qe.Nodes, &NodeError{Node: i, Err: r.err})
		case r.v == -3:
			no++
			qe.Nodes = append(qe.Nodes, &NodeError{Node: i, Err: ErrNotHeld})
		default:
			ttls = append(ttls, time.Duration(max(r.v, 0))*time.Millisecond)
		}
	}
	qe.OK = len(ttls)
	if len(ttls) < c.quorum {
		if no > len(c.nodes)-c.quorum {
			return 0, ErrNotHeld
		}
		return 0, &qe
	}
	// the lock lasts while a quorum holds it: the quorum-th longest lease
	slices.SortFunc(ttls, func(a, b time.Duration) int { return cmp.Compare(b, a) })
	return ttls[c.quorum-1], nil
}
