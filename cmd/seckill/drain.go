package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// drainer gives serve's server a shutdown that answers every request it
// accepted and leaves no keep-alive client guessing (the server's Handler
// is wrapped by handler, and its ConnState is connState).
//
// fasthttp's Shutdown alone closes idle connections at once, and it drops
// unanswered a request it reads while shutting down. A client of a busy
// connection whose last answer came without "Connection: close" sends its
// next request on it, and gets a transport error instead of an answer (the
// server never acted on it, but the client cannot know that). So a drain
// first goes lame duck: the listener closes (new connections are refused),
// and every response carries Connection: close, which tells each client to
// leave after its answer. Shutdown comes once only quiet connections are
// left, those idle for a while (--drain-idle): their clients are not
// sending, and the chance that one sends just as Shutdown closes it is
// small.
type drainer struct {
	lameDuck atomic.Bool
	conns    sync.Map // net.Conn -> *connInfo, every connection not yet closed
}

type connInfo struct {
	state atomic.Int32 // fasthttp.ConnState
	since atomic.Int64 // when it entered state, in Unix nanoseconds
}

func (ci *connInfo) set(s fasthttp.ConnState) {
	ci.state.Store(int32(s))
	ci.since.Store(time.Now().UnixNano())
}

// handler wraps h: in the lame duck, every response carries Connection:
// close.
func (d *drainer) handler(h fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		h(ctx)
		if d.lameDuck.Load() {
			ctx.SetConnectionClose()
		}
	}
}

// connState is the server's ConnState hook. A connection's own changes touch
// only its own entry, so the hot path takes no lock.
func (d *drainer) connState(c net.Conn, s fasthttp.ConnState) {
	switch s {
	case fasthttp.StateNew:
		ci := &connInfo{}
		ci.set(s)
		d.conns.Store(c, ci)
	case fasthttp.StateClosed, fasthttp.StateHijacked:
		d.conns.Delete(c)
	default:
		if v, ok := d.conns.Load(c); ok {
			v.(*connInfo).set(s)
		}
	}
}

// busy counts the connections that may still carry a request: those
// serving one, and those idle for less than quiet.
func (d *drainer) busy(quiet time.Duration) (busy, open int) {
	settled := time.Now().Add(-quiet).UnixNano()
	d.conns.Range(func(_, v any) bool {
		ci := v.(*connInfo)
		open++
		if fasthttp.ConnState(ci.state.Load()) == fasthttp.StateActive || ci.since.Load() > settled {
			busy++
		}
		return true
	})
	return busy, open
}

// drain stops srv, which serves ln until serveDone receives Serve's return:
// it closes ln, waits in the lame duck until only connections idle for
// idle are left, then shuts srv down. timeout bounds the whole drain;
// connections still busy then are cut, and drain says so in its error.
func (d *drainer) drain(srv *fasthttp.Server, ln net.Listener, serveDone <-chan error, timeout, idle time.Duration, log *slog.Logger) error {
	began := time.Now()
	deadline := began.Add(timeout)
	// The listener first: a client told to close would otherwise dial
	// again, and a connection still waiting in the accept queue is reset,
	// perhaps with its request already sent.
	_ = ln.Close()
	d.lameDuck.Store(true)
	// Serve has returned (with the listener's "closed" error): it accepts
	// nothing more, and Shutdown below has no listener left to close.
	if err := <-serveDone; err != nil && !errors.Is(err, net.ErrClosed) {
		log.Warn("serve", "err", err)
	}
	_, open := d.busy(0)
	log.Info("draining: listener closed, every answer now says Connection: close", "connections", open, "drain_timeout", timeout)

	quiet := min(idle, timeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		if n, _ := d.busy(quiet); n == 0 {
			break
		}
		<-tick.C
	}

	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	// The listener is closed already: Shutdown's error for it is expected.
	if err := srv.ShutdownWithContext(ctx); err != nil && !errors.Is(err, net.ErrClosed) {
		_, open := d.busy(0)
		d.cut()
		return fmt.Errorf("drain: %d connections still busy after --drain-timeout %v; cut", open, timeout)
	}
	log.Info("drained: every accepted request answered", "took", time.Since(began).Round(time.Millisecond))
	return nil
}

// cut closes every connection still open.
func (d *drainer) cut() {
	d.conns.Range(func(c, _ any) bool {
		_ = c.(net.Conn).Close()
		return true
	})
}
