package main

import (
	"io"
	"net"
	"sync/atomic"
	"time"

	"github.com/seckilldev/seckill/internal/lazyconn"
)

// A request refused while its client is still sending (a body beyond
// --max-body, headers beyond --max-header-bytes) is answered, and its
// connection closed. Closed at once, with the rest of the request unread,
// the kernel resets the connection, and the client, still writing, may see
// the reset instead of the answer. So such a connection lingers, as
// net/http's do: it stops writing (FIN after the answer), reads and drops
// what the client still sends, for at most lingerTime and lingerBytes, and
// only then closes.
const (
	lingerTime  = 500 * time.Millisecond
	lingerBytes = 256 << 10
)

// lingerListener hands out connections that can be told to linger, at
// most max of them open at once. A connection beyond is answered refusal
// (503 overloaded, JSON, Connection: close) and closed, lingering too, by
// at most maxRefusing goroutines (beyond, closed at once): nothing a
// client opens is kept without a bound.
type lingerListener struct {
	net.Listener
	max      int64
	refusal  []byte
	open     atomic.Int64
	refusing atomic.Int64
}

const maxRefusing = 256

func (l *lingerListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			l.refuse(c)
			continue
		}
		return &lingerConn{Conn: c, l: l}, nil
	}
}

func (l *lingerListener) refuse(c net.Conn) {
	_ = c.SetWriteDeadline(time.Now().Add(lingerTime))
	_, _ = c.Write(l.refusal)
	if l.refusing.Add(1) > maxRefusing {
		l.refusing.Add(-1)
		_ = c.Close()
		return
	}
	lc := &lingerConn{Conn: c}
	lc.linger.Store(true)
	lc.done = func() { l.refusing.Add(-1) }
	_ = lc.Close()
}

type lingerConn struct {
	net.Conn
	l      *lingerListener // nil for a refused connection
	linger atomic.Bool
	closed atomic.Bool
	done   func() // after a lingering close, if set
}

// lingerOnClose makes c's Close linger, if c is a lingerConn.
func lingerOnClose(c net.Conn) {
	if lc, ok := c.(*lingerConn); ok {
		lc.linger.Store(true)
	}
}

func (c *lingerConn) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	if c.l != nil {
		c.l.open.Add(-1)
	}
	if !c.linger.Load() {
		return c.Conn.Close()
	}
	closeWrite(c.Conn)
	go func() {
		_ = c.Conn.SetReadDeadline(time.Now().Add(lingerTime))
		_, _ = io.CopyN(io.Discard, c.Conn, lingerBytes)
		_ = c.Conn.Close()
		if c.done != nil {
			c.done()
		}
	}()
	return nil
}

// closeWrite shuts the writing half of c's TCP connection.
func closeWrite(c net.Conn) {
	for {
		switch x := c.(type) {
		case interface{ CloseWrite() error }:
			_ = x.CloseWrite()
			return
		case *lazyconn.Conn:
			c = x.Conn
		default:
			return
		}
	}
}
