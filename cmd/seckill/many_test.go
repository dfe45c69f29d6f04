package main

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/stock"
)

// TestManyLiveSales: one serve (worker on) with 500 live activities, on a
// Redis of its own, behind Sentinel, and on a 3-master Redis Cluster, with
// PostgreSQL. Every
// activity gets an order and each is written; idle, the process sends Redis
// (nearly) nothing, no client is blocked, and its goroutines come back to a
// small bound; one more activity can be created, and an unknown order id is
// answered 404. Throughput and latency are measured outside the tests:
// perf/many-sales.sh.
func TestManyLiveSales(t *testing.T) {
	const n = 500
	for _, topology := range []string{"standalone", "sentinel", "cluster"} {
		t.Run(topology, func(t *testing.T) {
			var nodes []*testenv.RedisServer // the masters
			var url string
			switch topology {
			case "cluster":
				nodes = testenv.StartCluster(t, 3)
				url = "redis+cluster://" + nodes[0].Addr
			case "sentinel":
				master, _ := testenv.StartReplicated(t)
				sentinel := testenv.StartSentinel(t, master, 1)
				nodes = []*testenv.RedisServer{master}
				url = "redis+sentinel://" + sentinel.Addr + "/" + sentinel.MasterName
			default:
				nodes = []*testenv.RedisServer{testenv.StartRedis(t)}
				url = "redis://" + nodes[0].Addr
			}
			before := runtime.NumGoroutine()
			in := startServe(t, backend{topology, url, testenv.PostgresURL(t)}, testenv.Prefix(t))
			orders := map[string]int64{}
			var ids []int64
			for i := range n {
				id := in.createActivity(10, 0)
				ids = append(ids, id)
				uid := int64(i + 1)
				r := in.grab(id, uid)
				if r.status != http.StatusAccepted {
					t.Fatalf("grab on activity %d: %d %v", id, r.status, r.body)
				}
				orders[r.body["order_id"].(string)] = uid
			}
			for oid, s := range in.waitOrders(orders) {
				if s != "confirmed" {
					t.Fatalf("order %s: %s, want confirmed", oid, s)
				}
			}

			// Idle: goroutines back to a small bound, no blocked client, and
			// (nearly) no command per second for 500 live sales.
			deadline := time.Now().Add(30 * time.Second)
			for runtime.NumGoroutine()-before > 150 {
				if time.Now().After(deadline) {
					t.Fatalf("%d goroutines for %d idle live activities (%d before serve), want a small bound",
						runtime.NumGoroutine(), n, before)
				}
				time.Sleep(50 * time.Millisecond)
			}
			clients := make([]*redis.Client, len(nodes))
			for i, node := range nodes {
				clients[i] = redis.NewClient(&redis.Options{Addr: node.Addr})
				defer clients[i].Close()
			}
			stat := func(section, field string) (sum int64) {
				for _, c := range clients {
					info, err := c.Info(context.Background(), section).Result()
					if err != nil {
						t.Fatal(err)
					}
					for _, line := range strings.Split(info, "\r\n") {
						if v, ok := strings.CutPrefix(line, field+":"); ok {
							x, _ := strconv.ParseInt(v, 10, 64)
							sum += x
						}
					}
				}
				return sum
			}
			// The worker trims each stream once after its orders are
			// acknowledged (every 10s, three commands per stream): a one-off,
			// not an idle cost. Wait until it has.
			waitTrimmed(t, url, in.prefix, ids)
			// Every poll period (5s) the worker reads each cold stream once,
			// in case a wake-up was lost; else nothing. A window of 5s sees
			// one poll, or two at the edges. (A blocking reader per stream
			// would send 5 commands per stream.)
			from := stat("stats", "total_commands_processed")
			time.Sleep(5 * time.Second)
			// INFO itself counts: one per node per call.
			idle := stat("stats", "total_commands_processed") - from - int64(len(nodes))
			if idle > 2*n+100 {
				t.Errorf("idle: %d redis commands in 5s for %d live activities, want at most two polls (%d each) and a few", idle, n, n)
			}
			if b := stat("clients", "blocked_clients"); b != 0 {
				t.Errorf("%d blocked redis clients, want 0", b)
			}
			if c := stat("clients", "connected_clients") - int64(len(nodes)); c > 80 {
				t.Errorf("%d redis connections, want at most the API's pool and the worker's", c)
			}

			id := in.createActivity(10, time.Minute)
			if r := in.do("GET", fmt.Sprintf("/api/v1/activities/%d", id), nil, ""); r.status != http.StatusOK {
				t.Errorf("activity %d after %d others: %d %v", id, n, r.status, r.body)
			}
			if r := in.do("GET", "/api/v1/orders/123456789", in.admin(), ""); r.status != http.StatusNotFound {
				t.Errorf("unknown order: %d %v, want 404", r.status, r.body)
			}
		})
	}
}

// TestRetiredSale: once a sale has ended and its orders are written, its
// keys leave Redis (--redis-retention; 1ms here); the database answers for
// it from then on (the activity, 403 ended, the orders), and nothing
// rebuilds it in Redis.
func TestRetiredSale(t *testing.T) {
	be := backend{"sqlite", redisURL(t), sqliteURL(t)}
	prefix := testenv.Prefix(t)
	in := startServe(t, be, prefix)
	now := time.Now()
	body := fmt.Sprintf(`{"name":"short","stock":10,"starts_at":%q,"ends_at":%q}`,
		now.Add(-time.Second).Format(time.RFC3339Nano), now.Add(2*time.Second).Format(time.RFC3339Nano))
	r := in.do("POST", "/api/v1/activities", in.admin(), body)
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %v", r.status, r.body)
	}
	id := int64(r.body["id"].(float64))
	orders := map[string]int64{}
	for uid := int64(1); uid <= 3; uid++ {
		r := in.grab(id, uid)
		if r.status != http.StatusAccepted {
			t.Fatalf("grab: %d %v", r.status, r.body)
		}
		orders[r.body["order_id"].(string)] = uid
	}
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	defer rdb.Close()
	keys := func() []string {
		k, err := rdb.Keys(context.Background(), prefix+":{a"+strconv.FormatInt(id, 10)+"}*").Result()
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	if len(keys()) == 0 {
		t.Fatal("no keys while the sale is live")
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(keys()) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("keys still in redis 30s after the end: %v", keys())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if r := in.grab(id, 1); r.status != http.StatusForbidden || r.code() != "ended" {
		t.Errorf("grab after retirement: %d %v, want 403 ended", r.status, r.body)
	}
	if r := in.grab(id, 99); r.status != http.StatusForbidden || r.code() != "ended" {
		t.Errorf("grab of a new buyer after retirement: %d %v, want 403 ended", r.status, r.body)
	}
	if r := in.do("GET", fmt.Sprintf("/api/v1/activities/%d", id), nil, ""); r.status != http.StatusOK || r.body["remaining"] != float64(7) {
		t.Errorf("activity after retirement: %d %v, want 200 with remaining 7", r.status, r.body)
	}
	for oid, s := range in.waitOrders(orders) {
		if s != "confirmed" {
			t.Errorf("order %s: %s, want confirmed", oid, s)
		}
	}
	if k := keys(); len(k) > 0 {
		t.Errorf("the retired sale came back into redis: %v", k)
	}
}

// waitTrimmed waits until the order streams of the activities are empty:
// the worker has trimmed its acknowledged entries.
func waitTrimmed(t *testing.T, url, prefix string, ids []int64) {
	t.Helper()
	ctx := context.Background()
	rdb, err := stock.Dial(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	testenv.WaitFor(t, "the worker trims the acknowledged orders", func() bool {
		pipe := rdb.Pipeline()
		lens := make([]*redis.IntCmd, len(ids))
		for i, id := range ids {
			lens[i] = pipe.XLen(ctx, stock.KeysFor(prefix, id).Orders)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return false
		}
		for _, l := range lens {
			if l.Val() != 0 {
				time.Sleep(100 * time.Millisecond) // 500 commands a try: poll gently
				return false
			}
		}
		return true
	})
}
