package worker

import (
	"context"
	"os/exec"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/stock"
)

// TestDeadShard: on a Redis Cluster, a master that stops answering (hung:
// SIGSTOP) while the worker holds a committed batch of its stream holds up
// no other: the orders of activities on the live masters are written while
// it is down, and its own stream resumes by itself once it answers again,
// its pending batch written and acknowledged.
func TestDeadShard(t *testing.T) {
	nodes := testenv.StartCluster(t, 3)
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.Addr
		// The live masters keep serving their slots while one is down.
		out, err := exec.Command("redis-cli", "-p", strconv.Itoa(n.Port), "config", "set",
			"cluster-require-full-coverage", "no").CombinedOutput()
		if err != nil {
			t.Fatalf("config set: %v: %s", err, out)
		}
	}
	s := newSalesOn(t, func(pool int) redis.UniversalClient {
		// The worker's client (a pool of its own) gives up on the hung
		// master after a second; the API's grabs, which the test needs
		// answered, allow a loaded machine 5 s.
		timeout := 5 * time.Second
		if pool > 0 {
			timeout = time.Second
		}
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, PoolSize: pool,
			ReadTimeout: timeout, WriteTimeout: timeout})
	}, 12, 100, time.Hour)
	ctx := context.Background()
	cluster := s.wClient.(*redis.ClusterClient)
	master := func(key string) string {
		c, err := cluster.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return c.Options().Addr
	}
	// The victim is the master of the first activity, unless it holds the
	// worker's subscription (whose loss is another matter: see Run).
	victim := master(s.api.Keys(s.acts[0])[0].Orders)
	if victim == master(s.api.WakeChannel()) {
		victim = master(s.api.Keys(s.acts[1])[0].Orders)
	}
	var dead, live []seckill.Activity
	for _, a := range s.acts {
		if master(s.api.Keys(a)[0].Orders) == victim {
			dead = append(dead, a)
		} else {
			live = append(live, a)
		}
	}
	if len(dead) == 0 || len(live) == 0 {
		t.Fatalf("%d activities on the victim, %d elsewhere: want some of each", len(dead), len(live))
	}
	t.Logf("victim %s: %d activities on it, %d elsewhere", victim, len(dead), len(live))
	var stopped *testenv.RedisServer
	for _, n := range nodes {
		if n.Addr == victim {
			stopped = n
		}
	}

	// The victim stops right after the database committed a batch of its
	// stream, before the batch is acknowledged.
	var arm atomic.Bool
	w := s.worker(Config{Consumer: "w", Poll: time.Hour, ClaimIdle: time.Hour, Discover: 50 * time.Millisecond})
	w.crashAt = func(stage string) bool {
		if stage == "committed" && arm.CompareAndSwap(true, false) {
			if err := stopped.Signal(syscall.SIGSTOP); err != nil {
				t.Error(err)
			}
		}
		return false
	}
	start(t, w)
	defer stopped.Signal(syscall.SIGCONT)

	grab := func(a seckill.Activity, uid int64) int64 {
		t.Helper()
		r, err := s.api.Grab(ctx, a, uid)
		if err != nil {
			t.Fatal(err)
		}
		return r.OrderID
	}
	first := grab(live[0], 1)
	// Acknowledged, the first batch is past its "committed" stage: the
	// next batch to reach it is the victim's. (Written only, it may not be
	// yet: the database commit comes first.)
	testenv.WaitFor(t, "a first order written and acknowledged", func() bool {
		p, err := s.api.Client().XPending(ctx, s.api.Keys(live[0])[0].Orders, stock.Group).Result()
		return s.written(t, first) && err == nil && p.Count == 0
	})

	arm.Store(true)
	held := grab(dead[0], 2)
	testenv.WaitFor(t, "the victim's batch committed", func() bool { return !arm.Load() })
	downAt := time.Now()
	var ids []int64
	for i, a := range live {
		ids = append(ids, grab(a, int64(100+i)))
	}
	took := testenv.WaitFor(t, "the live masters' orders written while one master is down", func() bool {
		for _, id := range ids {
			if !s.written(t, id) {
				return false
			}
		}
		return true
	})
	t.Logf("%d orders on live masters written %v after their grabs, the victim down %v", len(ids), took.Round(time.Millisecond),
		time.Since(downAt).Round(time.Millisecond))
	if !s.written(t, held) {
		t.Fatal("the victim's batch was committed, yet its order is not in the database")
	}

	if err := stopped.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	testenv.WaitFor(t, "the victim's stream acknowledged once it answers", func() bool {
		p, err := s.api.Client().XPending(ctx, s.api.Keys(dead[0])[0].Orders, stock.Group).Result()
		return err == nil && p.Count == 0
	})
	t.Logf("the victim's batch acknowledged %v after it answered again", time.Since(back).Round(time.Millisecond))
	late := grab(dead[0], 3)
	testenv.WaitFor(t, "a new order on the victim written", func() bool { return s.written(t, late) })
}
