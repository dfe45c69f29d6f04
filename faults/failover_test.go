package faults_test

import (
	"context"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill/check"
	"github.com/seckilldev/seckill/faults/internal/cluster"
	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/stock"
)

// TestFailover: the master that holds the sale is killed with kill -9 in
// the middle of a crowd of new buyers, on a Redis Cluster (3 masters with 2
// replicas each) and under Sentinel (a master with 2 replicas), after its
// replicas were cut off for a second (paused: the master's writes pile up
// for them) and with the worker paused (the orders of that second live in
// the master alone). A replica is promoted without them.
//
// With --ack-replicas 1 every grab answered 202 was confirmed by a
// replica first: every one ends as an order in the database, and every
// invariant holds but one that the promotion of the other replica can
// break (see below). Without it the grabs of that second are lost with the
// master; the checker must see the loss (it is printed), and every other
// invariant holds. Both report how long the sale took to answer 202 again
// after the promotion.
func TestFailover(t *testing.T) {
	for _, topo := range []string{"cluster", "sentinel"} {
		for _, ack := range []int{1, 0} {
			t.Run(topo+"/ack-replicas="+strconv.Itoa(ack), func(t *testing.T) {
				f := startFailover(t, topo)
				var args []string
				if ack > 0 {
					args = []string{"--ack-replicas", strconv.Itoa(ack)}
				}
				e := newEnv(t, envOptions{apis: 1, workers: 1, stock: 1_000_000, redisURL: f.url, apiArgs: args})
				f.locate(t, e)
				var recovery time.Duration
				out := e.run(e.crowd(40_000, 12_000, 600), func(ctx context.Context, p *cluster.CrowdProgress) {
					recovery = f.inject(ctx, t, e, p, ack > 0)
				})
				lost := result(t, out.report, check.NoLostOrder)
				t.Logf("LOST ACKNOWLEDGEMENTS: %d of %d grabs answered 202 (%s); outcome unknown (504): %d; unavailable (503): %d",
					lost.Count, out.crowd.Counts.Accepted, lost.Detail, out.crowd.Counts.Unknown, out.crowd.Counts.Unavailable)
				t.Logf("RECOVERY: the sale answered 202 again %v after the promotion", recovery.Round(time.Millisecond))
				if recovery > 30*time.Second {
					t.Errorf("the sale answered 202 again only %v after the promotion", recovery)
				}
				if ack > 0 {
					if !lost.Held {
						t.Errorf("%d grabs answered 202 with --ack-replicas %d were lost", lost.Count, ack)
					}
					// WAIT 1 of 2 replicas: the replica promoted may be the
					// one that had not acknowledged a grab yet. Its order is
					// safe (answered only once a replica held it, and
					// written by the worker before the pause), and the API
					// teaches the new master its unit and buyer again once
					// Redis answers (sale's resync); a buyer who clicks in
					// between may be told a second order id, which fails as
					// a duplicate.
					requireHeld(t, out.report, check.OneOrderID)
					return
				}
				// A buyer whose order was lost may grab again and be told
				// another order id.
				requireHeld(t, out.report, check.NoLostOrder, check.OneOrderID)
				if lost.Held {
					t.Error("no 202 was lost without --ack-replicas: the scenario did not lose the master's last second, or the checker missed it")
				}
			})
		}
	}
}

// failover is the Redis deployment of a TestFailover case.
type failover struct {
	url      string
	cluster  *testenv.Cluster  // "cluster"
	sentinel *testenv.Sentinel // "sentinel"
	nodes    []*testenv.RedisServer
	// master and replicas of the sale, found by locate.
	master   *testenv.RedisServer
	replicas []*testenv.RedisServer
	key      string // a key of the sale
}

func startFailover(t *testing.T, topo string) *failover {
	f := &failover{}
	switch topo {
	case "cluster":
		f.cluster = testenv.StartClusterReplicas(t, 3, 2, 2*time.Second)
		f.nodes = f.cluster.Nodes
		var extra []string
		for _, n := range f.nodes[1:] {
			extra = append(extra, "addr="+n.Addr)
		}
		f.url = "redis+cluster://" + f.nodes[0].Addr + "?" + strings.Join(extra, "&")
	case "sentinel":
		master, replica := testenv.StartReplicated(t)
		second := testenv.StartRedis(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port))
		f.sentinel = testenv.StartSentinel(t, master, 2)
		f.nodes = []*testenv.RedisServer{master, replica, second}
		f.master, f.replicas = master, []*testenv.RedisServer{replica, second}
		f.url = "redis+sentinel://" + f.sentinel.Addr + "/" + f.sentinel.MasterName
	}
	return f
}

// locate finds the master and replicas that hold the sale.
func (f *failover) locate(t *testing.T, e *env) {
	f.key = stock.KeysFor(e.prefix, e.activity).Meta
	if f.cluster != nil {
		f.master = f.cluster.MasterOf(t, f.key)
		f.replicas = f.cluster.ReplicasOf(t, f.master)
	}
	if len(f.replicas) == 0 {
		t.Fatal("the sale's master has no replica")
	}
}

// inject pauses the worker, cuts the replicas off (CLIENT KILL TYPE
// replica on the master, the replicas paused) for a second (or, without
// the durable yes, until the master alone accepted 100 more grabs), kills
// the master with kill -9, continues the replicas, waits for a promotion,
// and continues the worker; it returns how long after the promotion the
// sale answered 202 again.
func (f *failover) inject(ctx context.Context, t *testing.T, e *env, p *cluster.CrowdProgress, ack bool) time.Duration {
	if !waitAccepted(ctx, p, 500) {
		t.Error("the crowd never had 500 grabs accepted")
		return 0
	}
	w := e.c.Workers()[0]
	if err := w.Proc().Stop(); err != nil {
		t.Error(err)
		return 0
	}
	e.fault("worker SIGSTOP", "at %d accepted grabs", p.Accepted())
	// Paused, a replica still receives into its socket what the master
	// sends it, and reads it once continued: the master must stop sending.
	// Paused, it cannot reconnect.
	for _, r := range f.replicas {
		if err := r.Signal(syscall.SIGSTOP); err != nil {
			t.Error(err)
		}
	}
	admin := redis.NewClient(&redis.Options{Addr: f.master.Addr})
	defer admin.Close()
	if err := admin.ClientKillByFilter(ctx, "TYPE", "replica").Err(); err != nil {
		t.Error(err)
	}
	before := p.Accepted()
	e.fault("replicas cut off", "%d replicas of %s paused and their links closed at %d accepted grabs", len(f.replicas), f.master.Addr, before)
	if ack {
		time.Sleep(time.Second)
	} else if !cluster.Wait(ctx, 30*time.Second, func() bool { return p.Accepted() >= before+100 }) {
		t.Error("the master alone accepted fewer than 100 grabs in 30 s")
	}
	f.master.Kill()
	e.fault("master kill -9", "%s, %d grabs accepted since its replicas were cut off", f.master.Addr, p.Accepted()-before)
	for _, r := range f.replicas {
		if err := r.Signal(syscall.SIGCONT); err != nil {
			t.Error(err)
		}
	}
	var promoted string
	if f.cluster != nil {
		promoted = f.cluster.WaitPromoted(t, f.key, f.master).Addr
	} else {
		promoted = f.sentinel.WaitFailover(t, f.master)
	}
	at, n := time.Now(), p.Accepted()
	e.logf("promoted %s", promoted)
	if !cluster.Wait(ctx, time.Minute, func() bool { return p.Accepted() > n }) {
		t.Error("no grab was accepted within a minute of the promotion")
	}
	recovery := time.Since(at)
	if err := w.Proc().Cont(); err != nil {
		t.Error(err)
	}
	e.logf("worker continued; the sale answered 202 again %v after the promotion", recovery.Round(time.Millisecond))
	return recovery
}
