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
// leave after its answer. A connection left silent for a while
// (--drain-idle), idle since before the drain or new and never used, is
// closed then, each on its own: its client is not sending, and one that
// sends just as it is closed is not served (see claim). Shutdown comes
// once only such quiet connections are left. It cannot come sooner: it
// cancels the context of every request still to be handled (fasthttp's
// RequestCtx is the handlers' context), and a slow client's request, whose
// body is still coming, would then be answered with a cancelled context.
// Nor may the idle connections wait for Shutdown: a slow client, up to
// --read-timeout, would keep them all open as long.
type drainer struct {
	lameDuck atomic.Bool
	conns    sync.Map // net.Conn -> *connInfo, every connection not yet closed
}

type connInfo struct {
	state atomic.Int32 // fasthttp.ConnState, or stateClaimed
	since atomic.Int64 // when it entered state, in Unix nanoseconds
	// dropped: a request arrived on the connection after the drain had
	// claimed it; it is not handled.
	dropped atomic.Bool
}

// stateClaimed is the state of a quiet connection the drain closes.
const stateClaimed = -1

func (ci *connInfo) set(s fasthttp.ConnState) {
	if s == fasthttp.StateActive {
		// Swapped, so that the drain's claim and a request's arrival are
		// ordered: whichever comes second knows.
		if ci.state.Swap(int32(s)) == stateClaimed {
			ci.dropped.Store(true)
		}
	} else {
		ci.state.Store(int32(s))
	}
	ci.since.Store(time.Now().UnixNano())
}

// claim reports whether the drain may close c: it was new or idle and
// silent since before settled (Unix nanoseconds), and no request has
// arrived since. A request that arrives after the claim is not handled.
func (ci *connInfo) claim(settled int64) bool {
	s := ci.state.Load()
	if (s != int32(fasthttp.StateNew) && s != int32(fasthttp.StateIdle)) || ci.since.Load() > settled {
		return false
	}
	return ci.state.CompareAndSwap(s, stateClaimed)
}

// handler wraps h: in the lame duck, every response carries Connection:
// close, and a request on a connection the drain closed is not handled
// (the server may have read it whole before it saw the connection close).
func (d *drainer) handler(h fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		if d.lameDuck.Load() && d.dropped(ctx.Conn()) {
			ctx.SetConnectionClose()
			return
		}
		h(ctx)
		if d.lameDuck.Load() {
			ctx.SetConnectionClose()
		}
	}
}

func (d *drainer) dropped(c net.Conn) bool {
	v, ok := d.conns.Load(c)
	return ok && v.(*connInfo).dropped.Load()
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

// closeQuiet closes the connections new or idle for quiet or longer, and
// returns how many.
func (d *drainer) closeQuiet(quiet time.Duration) (closed int) {
	settled := time.Now().Add(-quiet).UnixNano()
	d.conns.Range(func(c, v any) bool {
		if v.(*connInfo).claim(settled) {
			_ = c.(net.Conn).Close()
			closed++
		}
		return true
	})
	return closed
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
// idle are left, closing each one as soon as it has been idle that long,
// then shuts srv down. timeout bounds the whole drain;
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
	closed := 0
	for time.Now().Before(deadline) {
		closed += d.closeQuiet(quiet)
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
	log.Info("drained: every accepted request answered", "took", time.Since(began).Round(time.Millisecond), "idle_closed", closed)
	return nil
}

// cut closes every connection still open.
func (d *drainer) cut() {
	d.conns.Range(func(c, _ any) bool {
		_ = c.(net.Conn).Close()
		return true
	})
}
