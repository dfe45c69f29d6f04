package faults_test

import (
	"context"
	"testing"
	"time"

	"github.com/seckilldev/seckill/faults/internal/cluster"
)

// TestRedisSlowAndUnreachable: every process reaches Redis through a TCP
// proxy. In the middle of the sale Redis first answers 1.5s late (longer
// than the service's 1s Redis timeouts) for three seconds, then is cut off
// (connections closed, new ones refused) for three seconds. Requests must
// end cleanly: an answer (503 unavailable or 504 outcome_unknown at worst:
// a grab sent to the slow Redis may have run) or the client's timeout, never
// another 5xx; nothing may be oversold or lost; everything drains once
// Redis is back.
func TestRedisSlowAndUnreachable(t *testing.T) {
	var px *proxy
	e := newEnv(t, envOptions{apis: 2, workers: 2, stock: 800, procRedis: func(direct string) string {
		px = startProxy(t, "redis", direct)
		return px.Addr()
	}})
	var duringSlow, duringCut int64
	out := e.run(e.crowd(1500, 2200, 300), func(ctx context.Context, p *cluster.CrowdProgress) {
		if !waitAccepted(ctx, p, e.stock/4) {
			return
		}
		px.Slow(1500 * time.Millisecond)
		e.fault("redis slow", "replies delayed by 1.5s for 3s")
		before := p.Requests()
		time.Sleep(3 * time.Second)
		px.Fast()
		duringSlow = p.Requests() - before
		e.logf("redis fast again; %d requests finished meanwhile", duringSlow)
		if !waitAccepted(ctx, p, e.stock/2) {
			return
		}
		px.Cut()
		e.fault("redis unreachable", "connections cut and refused for 3s")
		before = p.Requests()
		time.Sleep(3 * time.Second)
		px.Restore()
		duringCut = p.Requests() - before
		e.logf("redis reachable again; %d requests finished meanwhile", duringCut)
	})
	requireHeld(t, out.report)
	if e.faults.Total() < 2 {
		t.Errorf("the faults were not injected: %d, want 2", e.faults.Total())
	}
	c := out.crowd.Counts
	t.Logf("requests that ended without a grab: %d answered 503 (surely not taken), %d 504 (may have been), %d timed out, %d transport errors",
		c.Unavailable, c.Unknown, c.Timeouts, c.Errors)
	if n := out.crowd.ServerErrors(); n > 0 || c.Other > 0 {
		t.Errorf("requests did not end cleanly: %d 5xx other than 503 and 504, %d unexpected replies", n, c.Other)
	}
	if c.Unavailable+c.Unknown+c.Timeouts == 0 {
		t.Errorf("no request noticed that Redis was slow or away")
	}
}

// TestDatabaseDown: every process reaches PostgreSQL through a TCP proxy,
// which is cut for four seconds in the middle of the sale. The APIs keep
// accepting grabs (they need only Redis); the order stream holds them; the
// workers wait, keep their batches from being claimed, and catch up once
// the database is back. Nothing may be lost, doubled or oversold.
func TestDatabaseDown(t *testing.T) {
	var px *proxy
	e := newEnv(t, envOptions{apis: 2, workers: 2, stock: 800, procDB: func(direct string) string {
		px = startProxy(t, "postgres", direct)
		return px.Addr()
	}})
	var acceptedDuring int64
	var backlog string
	out := e.run(e.crowd(1500, 2200, 300), func(ctx context.Context, p *cluster.CrowdProgress) {
		if !waitAccepted(ctx, p, e.stock/4) {
			return
		}
		px.Cut()
		e.fault("database unreachable", "connections cut and refused for 4s")
		before := p.Accepted()
		time.Sleep(4 * time.Second)
		acceptedDuring = p.Accepted() - before
		st, err := e.chk.Backlog(ctx, e.activity)
		backlog = st.String()
		if err != nil {
			backlog = err.Error()
		}
		px.Restore()
		e.logf("database reachable again; %d grabs accepted meanwhile; stream: %s", acceptedDuring, backlog)
	})
	requireHeld(t, out.report)
	if e.faults.Total() < 1 {
		t.Fatalf("the fault was not injected")
	}
	if acceptedDuring == 0 {
		t.Errorf("no grab was accepted while the database was down: the stream should have held them")
	}
}
