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
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Client takes and releases locks on one Redis (New) or on a quorum of
// independent Redis nodes (NewRedlock). It is safe for concurrent use.
//
// A client owns at most one pub/sub subscription per node, to a channel of
// its own, opened by the first Lock that has to wait: through it the client
// learns that a waiter of its was given a lock.
type Client struct {
	nodes  []Redis
	quorum int

	prefix   string
	chanbase string // the channel of a client is chanbase + its id
	hooks    Hooks

	id  string        // random: the prefix of hold tokens, the name of the channel
	seq atomic.Uint64 // hold token counter

	waiters waiters

	local   sync.Mutex         // guards cohorts and their fields
	cohorts map[string]*cohort // by cohortKey

	ctx    context.Context // cancelled by Close with cause ErrClosed
	cancel context.CancelCauseFunc
	mu     sync.Mutex // guards closed and subbed
	closed bool
	subbed bool
	wg     sync.WaitGroup // subscriptions, and releases of unknown acquisitions
}

// New returns a client that keeps its locks on r.
func New(r Redis, opts ...Option) *Client {
	return newClient([]Redis{r}, opts)
}

// NewRedlock returns a client that runs the Redlock algorithm over nodes,
// independent Redis servers (not replicas of one another, not one Cluster):
// a lock is held when a majority of them granted it within its validity,
// lease - elapsed - drift, where drift is 1% of the lease plus 2 ms. Requests
// go to all nodes in parallel, and an operation ends as soon as a quorum has
// answered yes, so a node that is down or hangs costs nothing while a quorum
// answers (Lock.Tokens then has no token of it, nor of a node that answered
// after the quorum). Otherwise the nodes are awaited for a third of the
// lease at most (a quorum that answers within it leaves two thirds of the
// lease), and a node that has not answered by then counts as failed,
// whether or not its client honours context deadlines. A failed
// acquisition is released everywhere.
// Lock tries again after an attempt that failed for nodes that did not
// answer or answered with an error, on its retry strategy's schedule, until
// ctx ends (then its error holds the last attempt's QuorumError too);
// TryLock returns the QuorumError.
//
// Every node issues its own fencing token, so one number cannot order
// Redlock holders: Lock.Token returns the largest, for logs, and Lock.Tokens
// returns them all, for a resource that fences with them (see Tokens).
// Nodes are not Redis Cluster nodes: a Cluster is one node here. Redlock
// has no waiting line: a release wakes the first waiter of each node, which
// tries again. Semaphores and read-write locks need a single Redis.
//
// A node that restarts without its data forgets the locks it granted, and
// with a majority of such nodes a second holder gets in: run the nodes with
// AOF and appendfsync always, or keep a restarted node out of service for
// longer than the longest lease (as the Redlock specification says).
func NewRedlock(nodes []Redis, opts ...Option) *Client {
	if len(nodes) == 0 {
		panic("lock: NewRedlock needs at least one node")
	}
	return newClient(nodes, opts)
}

func newClient(rs []Redis, opts []Option) *Client {
	c := &Client{
		nodes:  slices.Clone(rs),
		quorum: len(rs)/2 + 1,
		prefix: DefaultPrefix,
	}
	for _, o := range opts {
		o(c)
	}
	c.chanbase = c.prefix + "client:"
	var b [12]byte
	rand.Read(b[:])
	c.id = base64.RawURLEncoding.EncodeToString(b[:])
	c.waiters.m = make(map[string]*waiter)
	c.cohorts = make(map[string]*cohort)
	c.ctx, c.cancel = context.WithCancelCause(context.Background())
	return c
}

// Close stops the client: the subscriptions end, waiting Lock calls return
// ErrClosed (and leave the line), and watchdogs stop renewing, so held
// locks expire within their lease; their contexts end with cause ErrClosed.
// Unlock still works.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.cancel(ErrClosed)
	c.wg.Wait()
	return nil
}

// redlock reports whether the client runs Redlock.
func (c *Client) redlock() bool { return len(c.nodes) > 1 }

// newLock prepares an acquisition of name with spec (see scripts/core.lua);
// it allocates little because it runs for every lock.
func (c *Client) newLock(name, spec string, cfg lockConfig) *Lock {
	l := &Lock{c: c, name: name, spec: spec, lockConfig: cfg}
	l.leaseArg, l.placeArg = defaultLeaseArg, defaultPlaceArg
	if l.lease != DefaultLease {
		l.leaseArg, l.placeArg = ms(l.lease), ms(placeTTL(l.lease))
	}
	// one allocation for the four keys and the hold token: K and F share
	// one copy of the key (F is K and its suffix), Q and W each repeat it,
	// then the token
	tagged := hashTagged(name)
	var b strings.Builder
	size := 3*(len(c.prefix)+len(name)) + len(fenceSuffix) + len(queueSuffix) + len(waitSuffix) + len(c.id) + 1 + 13
	if !tagged {
		size += 6
	}
	b.Grow(size)
	key := func(suffix string) int {
		b.WriteString(c.prefix)
		if tagged {
			b.WriteString(name)
		} else {
			b.WriteByte('{')
			b.WriteString(name)
			b.WriteByte('}')
		}
		b.WriteString(suffix)
		return b.Len()
	}
	n := key("")
	b.WriteString(fenceSuffix)
	f := b.Len()
	q := key(queueSuffix)
	w := key(waitSuffix)
	b.WriteString(c.id)
	b.WriteByte('.')
	var seq [13]byte
	b.Write(strconv.AppendUint(seq[:0], c.seq.Add(1), 36))
	all := b.String()
	l.keys = [4]string{all[:n], all[:f], all[f:q], all[q:w]}
	l.tok = all[w:]
	return l
}

var defaultLeaseArg, defaultPlaceArg = ms(DefaultLease), ms(placeTTL(DefaultLease))

// minLease keeps the drift allowance (2 ms and more) a small part of the
// lease.
const minLease = 10 * time.Millisecond

// mutexSpec returns the spec of a mutex acquisition (see scripts/core.lua).
func mutexSpec(cfg lockConfig) string {
	switch {
	case cfg.owner != "":
		return "o" + cfg.owner
	case cfg.metadata != "":
		return "h"
	}
	return "p"
}

// TryLock takes the mutex called name if it is free and nobody waits for
// it, without waiting. It returns an error matching ErrNotObtained when
// someone else holds it (or waits for it), or the Redis error; when ctx
// ends during the attempt, the error matches ErrNotObtained and ctx.Err().
// On one Redis, a plain mutex (no owner, no metadata) that is free costs
// one script call to take and one to release, each sent with only what
// that case reads; a lock that is free while someone waits, or held as
// another kind, costs one call more.
func (c *Client) TryLock(ctx context.Context, name string, opts ...LockOption) (*Lock, error) {
	cfg, err := config(opts)
	if err != nil {
		return nil, err
	}
	return c.try(ctx, c.newLock(name, mutexSpec(cfg), cfg))
}

// Lock takes the mutex called name, waiting until it is free or ctx ends.
// Waiters wait in line in Redis, across processes, and each gets the lock
// straight from the previous holder's release, in arrival order, without
// it ever being free: one round trip to join the line, none to be woken.
// The waiter refreshes its place now and then, and asks Redis again when
// the holder's lease ends (it may have died) and after a new subscription
// (a message may have been lost). Goroutines of this client that wait for
// the same plain mutex with the default watchdog and retry (a lease set by
// WithWatchdog is fine) form a cohort: one waits in the Redis line for all,
// and Unlock passes the hold on to the next of them in-process, without
// Redis, up to 16 times in a row before another client's waiter gets it
// (see the package documentation). When ctx ends first, the error matches
// both ErrNotObtained and ctx.Err(); when the retry strategy (WithRetry)
// gives up, ErrNotObtained.
//
// A reentrant acquisition by the owner that holds the lock does not wait.
// On one Redis, a Redis error ends the wait: Lock returns it. Redlock has
// no line: a release wakes the first waiter of each node, and whoever asks
// first gets the lock; an attempt that no quorum answered is tried again
// (see NewRedlock).
func (c *Client) Lock(ctx context.Context, name string, opts ...LockOption) (*Lock, error) {
	cfg, err := config(opts)
	if err != nil {
		return nil, err
	}
	return c.wait(ctx, c.newLock(name, mutexSpec(cfg), cfg))
}

// try makes one attempt at l, reporting it to the Acquire hook.
func (c *Client) try(ctx context.Context, l *Lock) (*Lock, error) {
	if c.ctx.Err() != nil {
		return nil, ErrClosed
	}
	_, err := c.acquire(ctx, l, attemptTry, time.Time{}) // since: for waiters only
	if h := c.hooks.Acquire; h != nil {
		h(l.name, time.Since(l.acquired), err)
	}
	if err != nil {
		return nil, notObtained(ctx, err)
	}
	l.arm()
	return l, nil
}

// wait takes l, waiting in line, reporting it to the Acquire hook.
func (c *Client) wait(ctx context.Context, l *Lock) (*Lock, error) {
	start := time.Now()
	var err error
	if key := c.cohortKey(l); key != "" {
		err = c.waitCohort(ctx, l, key)
	} else {
		err = c.waitFor(ctx, l)
	}
	if h := c.hooks.Acquire; h != nil {
		h(l.name, time.Since(start), err)
	}
	if err != nil {
		return nil, err
	}
	l.arm()
	return l, nil
}

// notObtained makes the error of an attempt that failed because ctx ended
// match ErrNotObtained and ctx.Err() (the attempt, whose outcome is
// unknown, is undone in the background).
func notObtained(ctx context.Context, err error) error {
	if ctx.Err() != nil && !errors.Is(err, ErrNotObtained) {
		return fmt.Errorf("%w (%w)", ErrNotObtained, ctx.Err())
	}
	return err
}

// needFull is what a script answers a short call that it cannot finish
// (see scripts/core.lua).
const needFull = -1 << 53

// How an attempt is made.
const (
	attemptTry  = "0" // no waiting
	attemptWait = "1" // join the line when taken
	attemptPoll = "2" // a waiter in line: refresh its place, or learn that it was given the lock
)

// waitFor takes l, waiting in line (see Lock).
func (c *Client) waitFor(ctx context.Context, l *Lock) error {
	if c.ctx.Err() != nil {
		return ErrClosed
	}
	first := l.retry.Backoff(1)
	if first <= 0 {
		_, err := c.acquire(ctx, l, attemptTry, time.Time{}) // since: for waiters only
		return notObtained(ctx, err)
	}
	c.subscribe()
	w := c.waiters.add(l.tok)
	defer c.waiters.remove(l.tok)

	// A grant made after the last attempt that found the lock taken runs
	// from after that attempt was sent. A grant made before it is gone (that
	// attempt found the waiter not holding the lock), and its message may
	// still come after it, when the waiter was paused past the grant's lease:
	// a poll tells the fencing tokens issued before it (l.polled), and a
	// grant with no token above them is confirmed with Redis, never believed.
	// So is a grant that a poll found given too long after the attempt before
	// it to be of use: the poll released it to the next waiter (acquire).
	sent := time.Now()
	hint, err := c.acquire(ctx, l, attemptWait, sent)
	if err == nil {
		return nil
	}
	if !c.waitOn(err) {
		return notObtained(ctx, err)
	}
	keep := keepEvery(l.lease)
	retryAt := sent.Add(jitter(first))
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for n := 1; ; {
		// Poll to keep the place in line, and right after the first hold's
		// lease ends (its holder may have died). On one Redis, the line
		// gives the lock and the retry strategy only says when to give up;
		// Redlock has no line, and polls on the strategy's schedule.
		keepAt, hintAt := sent.Add(keep), time.Time{}
		d := min(time.Until(retryAt), time.Until(keepAt))
		if hint > 0 {
			hintAt = sent.Add(hint + time.Millisecond + jitter(time.Millisecond))
			d = min(d, time.Until(hintAt))
		}
		timer.Reset(d)
		woken := false
		select {
		case <-ctx.Done():
			return c.leave(ctx, l, c.waitEnded(ctx.Err(), err))
		case <-c.ctx.Done():
			return c.leave(ctx, l, c.waitEnded(ErrClosed, err))
		case <-w.wake:
			if token, slots, ok := c.waiters.granted(w); ok && token > l.polled && l.setSlots(slots) == nil {
				l.token, l.acquired = token, sent
				switch err := c.confirm(ctx, l, sent); {
				case err == nil:
					return nil
				case errors.Is(err, ErrNotHeld):
					// given the lock, but too late to use it: wait on
				default:
					return c.leave(ctx, l, notObtained(ctx, err))
				}
			}
			// to try again: a Redlock release, a new subscription, or a grant
			// made before the last poll (see sent)
			woken = true
		case <-timer.C:
		}
		now := time.Now()
		poll := woken || !now.Before(keepAt) || hint > 0 && !now.Before(hintAt)
		if !now.Before(retryAt) {
			n++
			d := l.retry.Backoff(n)
			if d <= 0 {
				return c.leave(ctx, l, gaveUp(err))
			}
			retryAt = now.Add(jitter(d))
			poll = poll || c.redlock()
		}
		if !poll {
			continue
		}
		hint, err = c.acquire(ctx, l, attemptPoll, sent)
		if err == nil {
			return nil
		}
		if !c.waitOn(err) {
			return c.leave(ctx, l, notObtained(ctx, err))
		}
		sent = now
	}
}

// waitOn reports whether a waiter goes on waiting after an attempt that
// failed with err: the lock is taken, or, with Redlock, no quorum answered
// (nodes down, slow or failing: the next attempt may find a quorum).
func (c *Client) waitOn(err error) bool {
	if errors.Is(err, ErrKind) {
		return false
	}
	var qe *QuorumError
	return errors.Is(err, ErrNotObtained) || c.redlock() && errors.As(err, &qe)
}

// waitEnded is the error of a wait that ended for why (the context's error,
// or ErrClosed); with Redlock it holds the last attempt's error too, which
// tells nodes that did not answer from a lock that stayed taken.
func (c *Client) waitEnded(why, last error) error {
	if c.redlock() && last != nil {
		return fmt.Errorf("%w (%w; last attempt: %w)", ErrNotObtained, why, last)
	}
	return fmt.Errorf("%w (%w)", ErrNotObtained, why)
}

// gaveUp is the error of a wait whose retry strategy gave up after an
// attempt that failed with err: it matches ErrNotObtained.
func gaveUp(err error) error {
	if errors.Is(err, ErrNotObtained) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrNotObtained, err)
}

// keepEvery is how often a waiter refreshes its place in line; a place
// lasts three times as long (10 s at most), so that a waiter that is gone
// gets no lock after that. It is at most a third of the lease, which
// bounds how much shorter than its lease a lock given to a waiter is
// believed valid.
func keepEvery(lease time.Duration) time.Duration { return placeTTL(lease) / 3 }

func placeTTL(lease time.Duration) time.Duration { return min(lease, 10*time.Second) }

// confirm sets the validity of a lock given to a waiter: its lease began
// after since. When that leaves too little of it, confirm renews it first.
func (c *Client) confirm(ctx context.Context, l *Lock, since time.Time) error {
	l.validUntil = since.Add(l.lease - drift(l.lease))
	if time.Until(l.validUntil) > l.lease/3 {
		return nil
	}
	start := time.Now()
	st, err := c.extend(ctx, l, l.lease)
	switch st {
	case done:
		l.validUntil = start.Add(l.lease - drift(l.lease))
		return nil
	case refused:
		return ErrNotHeld
	}
	return err
}

// leave takes a waiter out of the line, and releases the lock if it was
// given it meanwhile; it returns err.
func (c *Client) leave(ctx context.Context, l *Lock, err error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout(l.lease))
	defer cancel()
	c.cancelWait(ctx, l)
	return err
}

// drift bounds the clock drift between client and servers over a lease.
func drift(lease time.Duration) time.Duration { return lease/100 + 2*time.Millisecond }

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

// nodeTimeout bounds how long a Redlock operation of a lock with lease
// awaits the nodes that have not answered, when those that have do not
// decide it (see each): a third of the lease, so that a quorum that
// answers within it leaves the holder two thirds, as the watchdog does. A
// tenth of the lease, 50 ms at least, was too short for a loaded machine
// (issue 25: at a 250 ms lease, 9 to 21 of 100 histories had an attempt
// fail for nodes that did not answer within 50 ms); as an operation ends
// once a quorum has answered, a longer wait costs nothing then.
func nodeTimeout(lease time.Duration) time.Duration { return lease / 3 }

// cleanupTimeout bounds the undoing of an acquisition or a wait (the
// cancel script, a release): longer than the lease is of no use, the hold
// and the place in line end with it.
func cleanupTimeout(lease time.Duration) time.Duration { return min(lease, time.Second) }

type result[T any] struct {
	v   T
	err error
}

var errNoAnswer = errors.New("no answer from Redis")

// each runs f on every node in parallel and returns the results by node,
// waiting for timeout at most: a node that has not answered by then (its
// client may not honour the context's deadline) fails with errNoAnswer, and
// its call ends in the background; when ctx ends first, they fail with its
// error. With yes, each returns as soon as a quorum of nodes answered yes:
// the nodes that have not answered then fail with errNoAnswer, and their
// calls go on in the background, until the timeout.
func each[T any](c *Client, parent context.Context, timeout time.Duration, f func(ctx context.Context, r Redis) (T, error),
	yes func(T, error) bool) []result[T] {
	ctx, cancel := context.WithTimeout(parent, timeout)
	answered := 0
	defer func() {
		if answered == len(c.nodes) {
			cancel()
		} // else the calls left end with ctx, at the timeout
	}()
	type answer struct {
		i int
		result[T]
	}
	answers := make(chan answer, len(c.nodes))
	for i, r := range c.nodes {
		go func() {
			v, err := f(ctx, r)
			answers <- answer{i, result[T]{v, err}}
		}()
	}
	res := make([]result[T], len(c.nodes))
	got := make([]bool, len(c.nodes))
	ok := 0
	decided := false
wait:
	for answered < len(c.nodes) {
		select {
		case a := <-answers:
			res[a.i], got[a.i] = a.result, true
			answered++
			if yes != nil && yes(a.v, a.err) {
				ok++
			}
			if ok >= c.quorum {
				decided = true
				break wait
			}
		case <-ctx.Done():
			break wait
		}
	}
	var why error
	switch {
	case decided:
		why = fmt.Errorf("%w yet: not awaited, a quorum had answered", errNoAnswer)
	case parent.Err() != nil:
		why = parent.Err()
	default:
		why = fmt.Errorf("%w within %v", errNoAnswer, timeout)
	}
	for i := range res {
		if !got[i] {
			res[i].err = why
		}
	}
	return res
}

// runAll runs s on every node (see each). A node that has not answered
// within the timeout is left to answer in the background, its client
// perhaps still reading the arguments after runAll returned: it gets a
// copy, so that a caller may reuse its own (acquire reuses the Lock's).
func (c *Client) runAll(ctx context.Context, lease time.Duration, s *script, keys, args []string,
	yes func(int64, error) bool) []result[int64] {
	args = slices.Clone(args)
	return each(c, ctx, nodeTimeout(lease), func(ctx context.Context, r Redis) (int64, error) {
		return run(ctx, r, s, keys, args)
	}, yes)
}

// What a node answers when a Redlock operation succeeds there (see
// runAll): acquired, extended, released, held.
var (
	acquiredYes = func(v int64, err error) bool { return err == nil && v > 0 }
	extendedYes = func(v int64, err error) bool { return err == nil && v == 1 }
	releasedYes = func(v int64, err error) bool { return err == nil && v != 0 }
	heldYes     = func(v int64, err error) bool { return err == nil && v != -3 }
)

// fifo is the scripts' argument for waiting in line: no line with Redlock.
func (c *Client) fifo() string {
	if c.redlock() {
		return "0"
	}
	return "1"
}

// acquire runs the acquire script (how: attemptTry, attemptWait or
// attemptPoll). On success it sets l's token, slots and validity: the lease
// runs from start, or, when the lock was given to the waiter earlier, from
// since. When the lock is taken it returns an error matching ErrNotObtained
// (possibly inside a QuorumError) and how long the first hold still runs.
func (c *Client) acquire(ctx context.Context, l *Lock, how string, since time.Time) (time.Duration, error) {
	// l.kv saves an allocation: on one Redis, acquisitions of one Lock
	// never overlap (Redlock's may: runAll copies the arguments).
	if how == attemptPoll && c.redlock() {
		how = attemptWait // Redlock gives no lock to waiters: no need to ask
	}
	kv := &l.kv
	*kv = [...]string{l.tok, l.leaseArg, l.spec, how, c.fifo(), l.placeArg, c.chanbase, l.metadata}
	keys, args := l.keys[:], kv[:7]
	if l.metadata != "" {
		args = kv[:]
	}
	start := time.Now()
	l.acquired = start
	strs := l.spec[0] == 's' || how == attemptPoll
	if !c.redlock() {
		var v int64
		var slots string
		held := false
		var err error
		// A plain mutex that does not wait is tried with a short call
		// (scripts/core.lua): the uncontended case's keys and arguments,
		// and in full only if the script finds another case. A hold so
		// taken is released with a short call too.
		l.short = how == attemptTry && l.spec == "p"
		switch {
		case l.short:
			v, err = run(ctx, c.nodes[0], acquireScript, keys[:3], args[:2])
			if err == nil && v == needFull {
				l.short = false
				v, err = run(ctx, c.nodes[0], acquireScript, keys, args)
			}
		case strs:
			var r []string
			r, err = runStrings(ctx, c.nodes[0], acquireScript, keys, args)
			if err == nil {
				v, slots, held, err = parseAcquired(r)
			}
			if err == nil && v < 0 && how == attemptPoll {
				l.polled = parseIssued(r)
			}
		default:
			v, err = run(ctx, c.nodes[0], acquireScript, keys, args)
		}
		if err == nil && v <= 0 {
			err = ErrNotObtained
			if v == 0 {
				err = errKind(l)
			}
		}
		if h := c.hooks.Attempt; h != nil {
			h(l.name, time.Since(start), err)
		}
		if err != nil {
			if errors.Is(err, ErrNotObtained) {
				return time.Duration(-1-v) * time.Millisecond, err
			}
			// The script may have run, and the reply been lost: undo it.
			c.undo(l)
			return 0, err
		}
		if err := l.setSlots(slots); err != nil {
			c.releaseQuietly(ctx, l)
			return 0, err
		}
		if held {
			// The lock was given to the waiter earlier: after since, unless
			// by a grant that an earlier poll found too old to use (below)
			// and failed to release, whose lease began before that poll.
			start = since
			if v <= l.polled {
				start = time.Time{}
			}
		}
		l.token = v
		l.validUntil = start.Add(l.lease - drift(l.lease))
		if !time.Now().Before(l.validUntil) {
			// Granted, but too slowly to be of use: released, to the next
			// waiter. A grant's message may still come for this hold, and
			// is not to be believed (see waitFor).
			if held {
				l.polled = max(l.polled, v)
			}
			c.releaseQuietly(ctx, l)
			return 0, ErrNotObtained
		}
		return 0, nil
	}

	res := c.runAll(ctx, l.lease, acquireScript, keys, args, acquiredYes)
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
		case r.v == 0:
			qe.Nodes = append(qe.Nodes, &NodeError{Node: i, Err: errKind(l)})
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

// parseAcquired reads the array reply of the acquire script: token, slots
// (see setSlots), and whether the hold already held the lock.
func parseAcquired(r []string) (token int64, slots string, held bool, err error) {
	if len(r) < 2 {
		return 0, "", false, fmt.Errorf("lock: acquire script replied %q", r)
	}
	token, err = strconv.ParseInt(r[0], 10, 64)
	return token, r[1], len(r) > 2 && r[2] == "1", err
}

// setSlots sets the slots of a semaphore hold from the scripts' list of
// them, "<slot>[,<slot>...]", lowest first; other locks have none.
func (l *Lock) setSlots(list string) error {
	if l.spec[0] != 's' {
		return nil
	}
	want := 1
	if _, n, ok := strings.Cut(l.spec, "x"); ok {
		want, _ = strconv.Atoi(n)
	}
	slots := make([]int, 0, want)
	for f := range strings.SplitSeq(list, ",") {
		n, err := strconv.Atoi(f)
		if err != nil {
			return fmt.Errorf("lock: slots %q from Redis: %w", list, err)
		}
		slots = append(slots, n)
	}
	if len(slots) != want {
		return fmt.Errorf("lock: slots %q from Redis for %d permits", list, want)
	}
	l.slots = slots
	return nil
}

// parseIssued reads what a poll that found the lock taken adds to its
// reply: a bound of the fencing tokens issued before it (0 if absent).
func parseIssued(r []string) int64 {
	if len(r) < 4 {
		return 0
	}
	n, _ := strconv.ParseInt(r[3], 10, 64)
	return n
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
		ctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), cleanupTimeout(l.lease))
		defer cancel()
		c.cancelWait(ctx, l)
	})
}

// releaseQuietly undoes a failed or useless acquisition on every node,
// even when ctx has ended.
func (c *Client) releaseQuietly(ctx context.Context, l *Lock) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout(l.lease))
	defer cancel()
	_, _ = c.release(ctx, l, false)
}

// cancelWait runs the cancel script: l leaves the line, and releases the
// lock if it holds it.
func (c *Client) cancelWait(ctx context.Context, l *Lock) {
	args := []string{l.tok, c.fifo(), c.chanbase}
	if !c.redlock() {
		_, _ = run(ctx, c.nodes[0], cancelScript, l.keys[:], args)
		return
	}
	c.runAll(ctx, l.lease, cancelScript, l.keys[:], args, nil)
}

// status of an extend or release.
type status int

const (
	done    status = iota // extended or released
	refused               // not held: definitive
	failed                // unknown: transport errors
)

// extend runs the extend script with lease.
func (c *Client) extend(ctx context.Context, l *Lock, lease time.Duration) (status, error) {
	keys := l.keys[:1]
	args := []string{l.tok, ms(lease)}
	if !c.redlock() {
		v, err := run(ctx, c.nodes[0], extendScript, keys, args)
		switch {
		case err != nil:
			return failed, err
		case v != 1:
			return refused, ErrNotHeld
		}
		return done, nil
	}
	start := time.Now()
	res := c.runAll(ctx, lease, extendScript, keys, args, extendedYes)
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

// release runs the release script, which also gives the lock to the
// waiters in line; with yield, to another client's first (see cohort).
func (c *Client) release(ctx context.Context, l *Lock, yield bool) (status, error) {
	kv := [...]string{l.tok, c.fifo(), c.chanbase, "0"}
	if yield {
		kv[3] = "1"
	}
	keys, args := l.keys[:], kv[:]
	if !c.redlock() {
		full := !l.short || yield
		var v int64
		var err error
		if !full {
			// a short call (see acquire); in full if someone may wait
			v, err = run(ctx, c.nodes[0], releaseScript, keys[:1], args[:1])
			full = err == nil && v == needFull
		}
		if full {
			v, err = run(ctx, c.nodes[0], releaseScript, keys, args)
		}
		switch {
		case err != nil:
			return failed, err
		case v == 0:
			return refused, ErrNotHeld
		}
		return done, nil
	}
	res := c.runAll(ctx, l.lease, releaseScript, keys, args, releasedYes)
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
		return done, nil
	case len(qe.Nodes) == no:
		return refused, ErrNotHeld // every node answered; a quorum did not hold it
	case ok > 0 && ok+no >= c.quorum:
		// Released where it was held, and a quorum now answered that it
		// does not hold it: whatever the silent nodes hold, no quorum can.
		// A lock taken on a bare quorum (a split vote under contention),
		// one node of which then failed, is released here, not unknown.
		return done, nil
	}
	return failed, &qe
}

// pttl runs the ttl script: the lease left on the server.
func (c *Client) pttl(ctx context.Context, l *Lock) (time.Duration, error) {
	keys := l.keys[:1]
	args := []string{l.tok}
	if !c.redlock() {
		v, err := run(ctx, c.nodes[0], ttlScript, keys, args)
		switch {
		case err != nil:
			return 0, err
		case v == -3:
			return 0, ErrNotHeld
		}
		return time.Duration(max(v, 0)) * time.Millisecond, nil
	}
	res := c.runAll(ctx, l.lease, ttlScript, keys, args, heldYes)
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
