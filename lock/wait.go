package lock

import (
	"strconv"
	"strings"
	"sync"
	"time"
)

// waiters are the goroutines of this process blocked in Lock (or Acquire,
// RLock), by hold token.
//
// Each waits in line in Redis (scripts/lib.lua). A release there gives the
// lock straight to the first waiter that fits and publishes the news on
// that waiter's client's channel: one message, to one client, for one
// goroutine. No other waiter wakes up, in this process or any other, so a
// contended lock costs two round trips per acquisition through Redis: one
// to join the line, one to release (which is the next holder's
// acquisition). A cohort (cohort.go) shares them among up to 17.
type waiters struct {
	mu sync.Mutex
	m  map[string]*waiter
}

type waiter struct {
	wake chan struct{} // buffered: a wake-up is never lost, repeated ones merge

	// guarded by waiters.mu
	given bool   // the lock was given to it
	token int64  // its fencing token
	slots string // its slots (semaphore: see Lock.setSlots)
}

func (ws *waiters) add(tok string) *waiter {
	w := &waiter{wake: make(chan struct{}, 1)}
	ws.mu.Lock()
	ws.m[tok] = w
	ws.mu.Unlock()
	return w
}

func (ws *waiters) remove(tok string) {
	ws.mu.Lock()
	delete(ws.m, tok)
	ws.mu.Unlock()
}

// granted reports whether w was given the lock, and with which fencing
// token and slots; it reports each gift once.
func (ws *waiters) granted(w *waiter) (token int64, slots string, ok bool) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ok, w.given = w.given, false
	return w.token, w.slots, ok
}

// message handles a message on the client's channel: "<hold token>
// <fencing token> <slots>" gives the lock to the waiter of that hold token;
// a fencing token of 0 wakes it to try again. A message for a waiter that
// left is dropped: leaving releases what it was given.
func (ws *waiters) message(payload string) {
	tok, rest, _ := strings.Cut(payload, " ")
	token, slots, _ := strings.Cut(rest, " ")
	t, err := strconv.ParseInt(token, 10, 64)
	if err != nil {
		return
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	w := ws.m[tok]
	if w == nil {
		return
	}
	if t > 0 {
		w.given, w.token, w.slots = true, t, slots
	}
	signal(w)
}

// wakeAll wakes every waiter: after a (re)subscription, messages sent while
// there was none are lost, and each waiter must ask Redis.
func (ws *waiters) wakeAll() {
	ws.mu.Lock()
	for _, w := range ws.m {
		signal(w)
	}
	ws.mu.Unlock()
}

func signal(w *waiter) {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// subscribe starts, once, one goroutine per node that keeps the client
// subscribed to its channel.
func (c *Client) subscribe() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.subbed || c.closed {
		return
	}
	c.subbed = true
	for _, r := range c.nodes {
		c.wg.Go(func() { c.listen(r) })
	}
}

// listen keeps r subscribed until the client is closed, resubscribing with
// a jittered backoff after a failure.
func (c *Client) listen(r Redis) {
	const minBackoff, maxBackoff = 50 * time.Millisecond, 2 * time.Second
	backoff := minBackoff
	for {
		start := time.Now()
		_ = r.Subscribe(c.ctx, c.chanbase+c.id, c.waiters.wakeAll, c.waiters.message)
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
