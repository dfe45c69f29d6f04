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

// lingerListener hands out connections that can be told to linger.
type lingerListener struct{ net.Listener }

func (l lingerListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &lingerConn{Conn: c}, nil
}

type lingerConn struct {
	net.Conn
	linger atomic.Bool
}

// lingerOnClose makes c's Close linger, if c is a lingerConn.
func lingerOnClose(c net.Conn) {
	if lc, ok := c.(*lingerConn); ok {
		lc.linger.Store(true)
	}
}

func (c *lingerConn) Close() error {
	if !c.linger.Load() {
		return c.Conn.Close()
	}
	closeWrite(c.Conn)
	go func() {
		_ = c.Conn.SetReadDeadline(time.Now().Add(lingerTime))
		_, _ = io.CopyN(io.Discard, c.Conn, lingerBytes)
		_ = c.Conn.Close()
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
