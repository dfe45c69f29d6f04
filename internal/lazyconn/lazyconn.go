// Package lazyconn makes the deadlines of a server's connections cheap.
//
// An HTTP server with timeouts sets several deadlines on a connection for
// every request it serves (net/http up to five: idle, header, whole
// request, write, and the clear after the idle wait; serve's fasthttp
// server three or four), and each one moves a runtime timer of the
// connection's poll descriptor: on the grab path under net/http, measured
// on a 2-core machine, that and the clock reads around it cost about a
// tenth of the server's CPU per request. Almost none of those deadlines ever fires: the
// next request comes, the headers arrive, the answer is written, and the
// deadline is replaced before it is due.
//
// A Listener's connections therefore only note the deadlines they are
// given. A reaper goroutine looks at every connection once per tick and
// applies, on the real connection, a deadline that has passed, which ends a
// blocked Read or Write with the usual timeout error (os.ErrDeadlineExceeded)
// exactly as a real deadline would, at most one tick late. A deadline
// already in the past when it is set (net/http uses one to interrupt its
// background read) is applied at once. The semantics are those of
// net.Conn's deadlines, with the precision of the tick.
package lazyconn

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Listener wraps a net.Listener; its connections' deadlines are lazy.
type Listener struct {
	net.Listener
	tick time.Duration

	now atomic.Int64 // the reaper's clock, Unix nanoseconds, at most a tick old

	mu     sync.Mutex
	conns  map[*Conn]struct{}
	closed bool // the listener is closed: the reaper ends with the last conn
	wake   chan struct{}
	reaped chan struct{} // closed when the reaper ends
}

// Listen wraps ln. tick is the precision of the deadlines (default 100 ms).
func Listen(ln net.Listener, tick time.Duration) *Listener {
	if tick <= 0 {
		tick = 100 * time.Millisecond
	}
	l := &Listener{Listener: ln, tick: tick, conns: map[*Conn]struct{}{}, wake: make(chan struct{}),
		reaped: make(chan struct{})}
	l.now.Store(time.Now().UnixNano())
	go l.reap()
	return l
}

// Accept returns the next connection, wrapped.
func (l *Listener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	c := &Conn{Conn: nc, l: l}
	l.mu.Lock()
	l.conns[c] = struct{}{}
	l.mu.Unlock()
	return c, nil
}

// Close closes the listener. Connections already accepted keep their
// deadlines until they close: the reaper ends after the last.
func (l *Listener) Close() error {
	l.mu.Lock()
	if !l.closed {
		l.closed = true
		close(l.wake)
	}
	l.mu.Unlock()
	return l.Listener.Close()
}

func (l *Listener) reap() {
	defer close(l.reaped)
	t := time.NewTicker(l.tick)
	defer t.Stop()
	var conns []*Conn
	closing := l.wake
	for {
		select {
		case <-t.C:
		case <-closing:
			closing = nil // look once more now, then at every tick
		}
		now := time.Now().UnixNano()
		l.now.Store(now)
		l.mu.Lock()
		conns = conns[:0]
		for c := range l.conns {
			conns = append(conns, c)
		}
		done := l.closed && len(l.conns) == 0
		l.mu.Unlock()
		if done {
			return
		}
		for _, c := range conns {
			c.expire(now)
		}
		clear(conns) // let closed connections go
	}
}

// Conn is a connection whose deadlines are applied by its listener's reaper.
type Conn struct {
	net.Conn
	l *Listener

	mu          sync.Mutex // guards read and write
	read, write deadline
	closeOnce   sync.Once
}

// deadline is one direction's deadline.
type deadline struct {
	at   int64 // the deadline set and not yet applied, Unix nanoseconds (0: none)
	past bool  // a past deadline is on the real connection: clear it before the next call
}

// past reports whether deadline t has certainly come, reading the real
// clock only when the coarse one cannot tell.
func (c *Conn) past(t time.Time) bool {
	if t.IsZero() {
		return false
	}
	n := t.UnixNano()
	coarse := c.l.now.Load()
	switch {
	case n <= coarse:
		return true
	case n > coarse+2*int64(c.l.tick):
		return false
	}
	return !t.After(time.Now())
}

// SetReadDeadline notes t; the reaper applies it when it passes. A past t
// applies at once.
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.set(&c.read, t, c.Conn.SetReadDeadline)
}

// SetWriteDeadline notes t; the reaper applies it when it passes. A past t
// applies at once.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.set(&c.write, t, c.Conn.SetWriteDeadline)
}

// SetDeadline sets both deadlines.
func (c *Conn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.set(&c.read, t, c.Conn.SetReadDeadline); err != nil {
		return err
	}
	return c.set(&c.write, t, c.Conn.SetWriteDeadline)
}

// set notes deadline t of one direction, whose real setter is apply.
func (c *Conn) set(d *deadline, t time.Time, apply func(time.Time) error) error {
	if c.past(t) {
		d.at, d.past = 0, true
		return apply(t)
	}
	d.at = unixNano(t)
	if d.past {
		d.past = false
		return apply(time.Time{})
	}
	return nil
}

// expire applies the deadlines that passed by now.
func (c *Conn) expire(now int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.read.expire(now, c.Conn.SetReadDeadline)
	c.write.expire(now, c.Conn.SetWriteDeadline)
}

// expire applies d with apply if it passed by now.
func (d *deadline) expire(now int64, apply func(time.Time) error) {
	if d.at != 0 && d.at <= now {
		_ = apply(time.Unix(0, d.at))
		d.at, d.past = 0, true
	}
}

// Close closes the connection and forgets it.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// unixNano is t in Unix nanoseconds, 0 for the zero time and for a time
// too far ahead to count in them (after 2242): no deadline.
func unixNano(t time.Time) int64 {
	if t.IsZero() || t.Unix() > 1<<33 {
		return 0
	}
	return t.UnixNano()
}
