package lazyconn

import (
	"errors"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

const tick = 10 * time.Millisecond

// pair returns a server-side lazy Conn and the client's end.
func pair(t *testing.T) (*Listener, *Conn, net.Conn) {
	t.Helper()
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := Listen(tcp, tick)
	t.Cleanup(func() { l.Close() })
	client, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return l, c.(*Conn), client
}

// readErr reads from c in a goroutine and returns where the result arrives.
func readErr(c net.Conn) <-chan error {
	ch := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		ch <- err
	}()
	return ch
}

func wait(t *testing.T, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(30 * time.Second): // liveness bound, not a timing assertion
		t.Fatal("the blocked call never returned")
		return nil
	}
}

// servesLater checks that a read on c, blocked for several ticks, gets what
// the client then sends: no deadline ended it.
func servesLater(t *testing.T, c, client net.Conn, what string) {
	t.Helper()
	ch := readErr(c)
	time.Sleep(5 * tick)
	if _, err := client.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := wait(t, ch); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// A deadline that passes ends a blocked Read with the error a real deadline
// gives; clearing it lets the connection read again.
func TestReadDeadlineFires(t *testing.T) {
	_, c, client := pair(t)
	if err := c.SetReadDeadline(time.Now().Add(3 * tick)); err != nil {
		t.Fatal(err)
	}
	err := wait(t, readErr(c))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read ended with %v, want a deadline error", err)
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("%v is not a net.Error with Timeout()", err)
	}
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	servesLater(t, c, client, "read after the deadline was cleared")
}

// A deadline replaced before it is due never fires: the reaper applies only
// the last one set.
func TestReadDeadlineReplaced(t *testing.T) {
	_, c, client := pair(t)
	if err := c.SetReadDeadline(time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	servesLater(t, c, client, "read with the deadline replaced")
}

// A deadline in the past applies at once, as net/http's interruption of its
// background read needs, and a later zero deadline undoes it.
func TestPastDeadlineAtOnce(t *testing.T) {
	_, c, client := pair(t)
	ch := readErr(c)
	// aLongTimeAgo, as net/http uses it.
	if err := c.SetReadDeadline(time.Unix(1, 0)); err != nil {
		t.Fatal(err)
	}
	if err := wait(t, ch); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read ended with %v, want a deadline error", err)
	}
	// The reaper never clears a deadline: only the immediate path can.
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	ch = readErr(c)
	if _, err := client.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := wait(t, ch); err != nil {
		t.Fatalf("read after the past deadline was cleared: %v", err)
	}
}

// A write that blocks (the peer does not read) ends at its deadline.
func TestWriteDeadlineFires(t *testing.T) {
	_, c, _ := pair(t)
	if err := c.SetWriteDeadline(time.Now().Add(3 * tick)); err != nil {
		t.Fatal(err)
	}
	ch := make(chan error, 1)
	go func() {
		buf := make([]byte, 1<<20)
		for {
			if _, err := c.Write(buf); err != nil {
				ch <- err
				return
			}
		}
	}()
	if err := wait(t, ch); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write ended with %v, want a deadline error", err)
	}
}

// SetDeadline sets both; the deadlines of one connection never touch
// another's.
func TestSetDeadlineBoth(t *testing.T) {
	_, c, _ := pair(t)
	_, other, otherClient := pair(t)
	if err := c.SetDeadline(time.Now().Add(3 * tick)); err != nil {
		t.Fatal(err)
	}
	if err := wait(t, readErr(c)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read ended with %v, want a deadline error", err)
	}
	servesLater(t, other, otherClient, "the other connection's read")
}

// Connections leave the reaper's list when they close, and the reaper ends
// once the listener is closed and its last connection too.
func TestReaperEnds(t *testing.T) {
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := Listen(tcp, tick)
	var wg sync.WaitGroup
	var conns []net.Conn
	for range 3 {
		client, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close()
		c, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	if n := count(l); n != 3 {
		t.Fatalf("%d connections listed, want 3", n)
	}
	l.Close()
	// Accepted connections outlive the listener, deadlines included.
	if err := conns[0].SetReadDeadline(time.Now().Add(3 * tick)); err != nil {
		t.Fatal(err)
	}
	if err := wait(t, readErr(conns[0])); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read after the listener closed ended with %v, want a deadline error", err)
	}
	for _, c := range conns {
		wg.Go(func() { c.Close(); c.Close() }) // twice: the second changes nothing
	}
	wg.Wait()
	if n := count(l); n != 0 {
		t.Fatalf("%d connections listed after they closed", n)
	}
	select {
	case <-l.reaped:
	case <-time.After(30 * time.Second): // liveness bound
		t.Fatal("the reaper still runs with the listener and its connections closed")
	}
}

func count(l *Listener) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

// Deadlines set while the reaper applies others: no race, and the last
// deadline set is the one that holds (run with -race).
func TestConcurrentDeadlines(t *testing.T) {
	_, c, client := pair(t)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i := range 2000 {
				d := time.Now().Add(time.Duration(i%3) * tick)
				if i%2 == 0 {
					d = time.Time{}
				}
				_ = c.SetReadDeadline(d)
				_ = c.SetWriteDeadline(d)
			}
		})
	}
	wg.Wait()
	if err := c.SetDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	servesLater(t, c, client, "read with every deadline cleared")
}

// The deadlines net/http sets around one request on a keep-alive
// connection (idle wait, its clear, header, whole request, write), lazy and
// real.
func BenchmarkRequestDeadlines(b *testing.B) {
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	l := Listen(tcp, 0)
	defer l.Close()
	client, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()
	c, err := l.Accept()
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for _, bc := range []struct {
		name string
		conn net.Conn
	}{{"lazy", c}, {"real", c.(*Conn).Conn}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				now := time.Now()
				_ = bc.conn.SetReadDeadline(now.Add(2 * time.Minute))
				_ = bc.conn.SetReadDeadline(time.Time{})
				_ = bc.conn.SetReadDeadline(now.Add(5 * time.Second))
				_ = bc.conn.SetReadDeadline(now.Add(10 * time.Second))
				_ = bc.conn.SetWriteDeadline(now.Add(10 * time.Second))
			}
		})
	}
}
