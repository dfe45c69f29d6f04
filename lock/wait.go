package lock

import (
	"sync"
	"sync/atomic"
	"time"
)

// waiters are the goroutines of this process blocked in Lock, queued per
// lock key.
//
// Two things wake them. An Unlock in this process hands the lock straight
// to the first waiter when no other client waits (the release script checks
// that): the lock is never free, and one round trip serves both the release
// and the acquisition. Otherwise the release publishes a message, and the
// first waiter of each client tries to take the lock; whoever fails flags it
// again, so the next release publishes again. Waking one waiter per client
// instead of all, and letting newcomers queue behind waiters instead of
// trying, keeps a contended lock at about one script per acquisition.
type waiters struct {
	n    atomic.Int64  // waiters of all keys, to keep the fast path lock-free
	msgs atomic.Uint64 // release messages and resubscriptions seen
	mu   sync.Mutex
	q    map[string][]*waiter
}

type waiter struct {
	lock *Lock         // the acquisition the waiter is making
	wake chan struct{} // buffered: a wake-up is never lost, repeated ones merge

	// guarded by waiters.mu
	attempting bool // running the acquire script: not to be handed the lock
	claimed    bool // an Unlock is handing the lock over to this waiter
	granted    bool // it did: lock holds the token and lease
	left       bool // the waiter gave up during a handoff
}

func (ws *waiters) add(l *Lock) *waiter {
	w := &waiter{lock: l, wake: make(chan struct{}, 1)}
	ws.mu.Lock()
	ws.q[l.rkey] = append(ws.q[l.rkey], w)
	ws.mu.Unlock()
	ws.n.Add(1)
	return w
}

// remove takes w out of its queue. A first waiter that leaves without the
// lock may have swallowed a wake-up meant for the queue: it passes it on.
func (ws *waiters) remove(w *waiter, acquired bool) {
	ws.n.Add(-1)
	ws.mu.Lock()
	defer ws.mu.Unlock()
	key := w.lock.rkey
	q := ws.q[key]
	for i, x := range q {
		if x != w {
			continue
		}
		q = append(q[:i], q[i+1:]...)
		if len(q) == 0 {
			delete(ws.q, key)
			return
		}
		ws.q[key] = q
		if i == 0 && !acquired {
			signal(q[0])
		}
		return
	}
}

// others reports whether goroutines other than self wait for key.
func (ws *waiters) others(key string, self *waiter) bool {
	if ws.n.Load() == 0 {
		return false
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	q := ws.q[key]
	return len(q) > 1 || len(q) == 1 && q[0] != self
}

// waitState is what a waiter should do after a wake-up.
type waitState int

const (
	attempt waitState = iota // try to take the lock
	handoff                  // an Unlock is handing it over: wait for the outcome
	granted                  // it was handed over: the lock is ours
)

func (ws *waiters) state(w *waiter) waitState {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	switch {
	case w.granted:
		return granted
	case w.claimed:
		return handoff
	}
	return attempt
}

// begin returns what w should do; when it is to attempt, w is marked as
// attempting until done is called, so that no handoff races the attempt.
func (ws *waiters) begin(w *waiter) waitState {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	switch {
	case w.granted:
		return granted
	case w.claimed:
		return handoff
	}
	w.attempting = true
	return attempt
}

func (ws *waiters) done(w *waiter) {
	ws.mu.Lock()
	w.attempting = false
	ws.mu.Unlock()
}

// leave is called by a waiter that gives up. It reports whether the lock
// was handed over to it anyway; if a handoff is under way, its outcome will
// be released by the Unlock that makes it.
func (ws *waiters) leave(w *waiter) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if w.granted {
		return true
	}
	w.left = w.claimed
	return false
}

// claim picks the first waiter for key that a plain lock can be handed to,
// and reports whether others wait besides it.
func (ws *waiters) claim(key string) (w *waiter, more bool) {
	if ws.n.Load() == 0 {
		return nil, false
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	q := ws.q[key]
	for _, x := range q {
		if !x.attempting && !x.claimed && !x.granted && !x.lock.isHash() {
			x.claimed = true
			return x, len(q) > 1
		}
	}
	return nil, false
}

// resolve ends a handoff to w that started at start. If the lock was handed
// over but the waiter has left, resolve returns the lock for the caller to
// release.
func (ws *waiters) resolve(w *waiter, handed bool, token int64, start time.Time) (abandoned *Lock) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	w.claimed = false
	if handed {
		l := w.lock
		l.token = token
		l.acquired = start
		l.validUntil = start.Add(l.lease - drift(l.lease))
		if w.left {
			return l
		}
		w.granted = true
	}
	signal(w)
	return nil
}

// released wakes the first waiter for key.
func (ws *waiters) released(key string) {
	ws.msgs.Add(1)
	if ws.n.Load() == 0 {
		return
	}
	ws.mu.Lock()
	if q := ws.q[key]; len(q) > 0 {
		signal(q[0])
	}
	ws.mu.Unlock()
}

// wakeAll wakes the first waiter of every key: after a (re)subscription,
// messages sent while there was none are lost.
func (ws *waiters) wakeAll() {
	ws.msgs.Add(1)
	ws.mu.Lock()
	for _, q := range ws.q {
		signal(q[0])
	}
	ws.mu.Unlock()
}

func signal(w *waiter) {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// subscribe starts, once, one goroutine per node that keeps a pattern
// subscription to the client's release channels.
func (c *Client) subscribe() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.subbed || c.closed {
		return
	}
	c.subbed = true
	pattern := globEscape(c.prefix) + "*"
	for _, n := range c.nodes {
		c.wg.Go(func() { c.listen(n, pattern) })
	}
}

// listen keeps n subscribed until the client is closed, resubscribing with
// a jittered backoff after a failure.
func (c *Client) listen(n *node, pattern string) {
	const minBackoff, maxBackoff = 50 * time.Millisecond, 2 * time.Second
	backoff := minBackoff
	for {
		start := time.Now()
		_ = n.r.PSubscribe(c.ctx, pattern, c.waiters.wakeAll, c.waiters.released)
		if time.Since(start) > 10*maxBackoff {
			backoff = minBackoff
		}
		t := time.NewTimer(jitter(backoff))
		select {
		case <-c.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, maxBackoff)
	}
}
