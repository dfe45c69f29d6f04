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
// the reset instead of the answer: Go's http.Client, told "broken pipe" by
// its write before it has taken the answer its reader holds, reports the
// error (33 of 40 POSTs of 4 MB did, when a lingering connection closed as
// soon as it had dropped lingerBytes). So such a connection lingers, as
// net/http's do (closeWriteAndWait): it stops writing (FIN after the
// answer), reads and drops what the client still sends, at most
// lingerBytes, then reads no more but stays open until lingerTime has
// passed since the answer: the client's writes block on a full window
// while it reads the answer, and it closes first. A refused connection
// thus costs at most lingerBytes read and lingerTime, and counts against
// --max-conns until it is closed.
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
	bareLF   []byte // the answer to a line that ends in a bare LF (see lineWatch)
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
		return &lingerConn{Conn: c, l: l, lines: newLineWatch()}, nil
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
	done   func() // once c is closed, lingering over, if set

	lines   lineWatch   // what the client sends (read by the server's goroutine of c)
	bareLF  bool        // a request ends in a bare LF: refuse it at the next Read
	refused atomic.Bool // c was answered l.bareLF: the server reads and writes no more
}

// Read reads what the client sends, and answers a request whose head has
// a line that ends in a bare LF itself, once the server has read the
// requests before it: the server then reads the end of the stream, and its
// own writes (an answer to the request cut short) are dropped.
func (c *lingerConn) Read(p []byte) (int, error) {
	if c.bareLF {
		return 0, c.refuse()
	}
	n, err := c.Conn.Read(p)
	if n > 0 {
		if whole, bad := c.lines.scan(p[:n]); bad {
			if c.bareLF = true; whole == 0 {
				return 0, c.refuse()
			}
			return whole, nil
		}
	}
	return n, err
}

// refuse answers a request with a bare LF, once, and returns io.EOF.
func (c *lingerConn) refuse() error {
	if !c.refused.Swap(true) {
		c.linger.Store(true)
		_ = c.Conn.SetWriteDeadline(time.Now().Add(lingerTime))
		_, _ = c.Conn.Write(c.l.bareLF)
	}
	return io.EOF
}

func (c *lingerConn) Write(p []byte) (int, error) {
	if c.refused.Load() {
		return len(p), nil
	}
	return c.Conn.Write(p)
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
	if !c.linger.Load() {
		c.release()
		return c.Conn.Close()
	}
	closeWrite(c.Conn)
	go func() {
		defer c.release()
		until := time.Now().Add(lingerTime)
		_ = c.Conn.SetReadDeadline(until)
		if n, _ := io.CopyN(io.Discard, c.Conn, lingerBytes); n == lingerBytes {
			// Still sending: let the window fill while the client reads.
			time.Sleep(time.Until(until))
		}
		_ = c.Conn.Close()
	}()
	return nil
}

// release ends c's count against the listener's bounds.
func (c *lingerConn) release() {
	if c.l != nil {
		c.l.open.Add(-1)
	}
	if c.done != nil {
		c.done()
	}
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
