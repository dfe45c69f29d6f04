package main

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/stock"
	"github.com/seckilldev/seckill/store"
)

func sqliteURL(t testing.TB) string { return "sqlite://" + filepath.Join(t.TempDir(), "seckill.db") }

func redisURL(t testing.TB) string { return "redis://" + testenv.RedisAddr(t) }

// dbRemaining reads activities.remaining straight from the database.
func dbRemaining(t testing.TB, dbURL string, id int64) int64 {
	t.Helper()
	s, err := store.Open(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a, err := s.Activity(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return a.Remaining
}

// TestConcurrentBuyers: 200 concurrent buyers, stock 10: exactly 10
// confirmed orders, stock 0 in Redis and in the database; on every engine
// and on Redis Cluster.
func TestConcurrentBuyers(t *testing.T) {
	cases := []func(t *testing.T) backend{
		func(t *testing.T) backend { return backend{"sqlite", redisURL(t), sqliteURL(t)} },
		func(t *testing.T) backend { return backend{"postgres", redisURL(t), testenv.PostgresURL(t)} },
		func(t *testing.T) backend { return backend{"mysql", redisURL(t), testenv.MySQLURL(t)} },
		func(t *testing.T) backend {
			nodes := testenv.StartCluster(t, 3)
			return backend{"cluster", "redis+cluster://" + nodes[0].Addr, testenv.PostgresURL(t)}
		},
	}
	for i, name := range []string{"sqlite", "postgres", "mysql", "cluster"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			be := cases[i](t)
			in := startServe(t, be, testenv.Prefix(t))
			id := in.createActivity(10, 0)
			users := make([]int64, 200)
			for i := range users {
				users[i] = int64(i + 1)
			}
			answered, statuses := in.crowd(id, users)
			if statuses[http.StatusAccepted] != 10 || statuses[http.StatusConflict] != 190 {
				t.Errorf("replies: got %v, want 10 accepted and 190 sold out", statuses)
			}
			orders := map[string]int64{}
			for uid, ids := range answered {
				for oid := range ids {
					orders[oid] = uid
				}
			}
			confirmed := 0
			for _, s := range in.waitOrders(orders) {
				if s == "confirmed" {
					confirmed++
				}
			}
			if confirmed != 10 {
				t.Errorf("confirmed orders: got %d, want 10", confirmed)
			}
			if got := in.activity(id)["remaining"].(float64); got != 0 {
				t.Errorf("remaining in redis: got %v, want 0", got)
			}
			if got := dbRemaining(t, be.dbURL, id); got != 0 {
				t.Errorf("remaining in the database: got %d, want 0", got)
			}
		})
	}
}

// TestOneUserFiftyClicks: one user grabbing 50 times at once gets one order,
// and every reply names it.
func TestOneUserFiftyClicks(t *testing.T) {
	be := backend{"sqlite", redisURL(t), sqliteURL(t)}
	in := startServe(t, be, testenv.Prefix(t))
	for _, stockN := range []int64{1, 100} {
		id := in.createActivity(stockN, 0)
		users := make([]int64, 50)
		for i := range users {
			users[i] = 4242
		}
		answered, statuses := in.crowd(id, users)
		if len(answered[4242]) != 1 {
			t.Fatalf("stock %d: the user was told of %d orders: %v (replies %v)", stockN, len(answered[4242]), answered, statuses)
		}
		if statuses[http.StatusAccepted] != 1 || statuses[http.StatusOK] != 49 {
			t.Errorf("stock %d: replies %v, want one 202 and 49 200", stockN, statuses)
		}
		for oid := range answered[4242] {
			if s := in.waitOrders(map[string]int64{oid: 4242})[oid]; s != "confirmed" {
				t.Errorf("stock %d: order status %s", stockN, s)
			}
			// Clicking again names the order and claims no state of it (it
			// said "pending" of confirmed and paid orders).
			r := in.grab(id, 4242)
			if _, claims := r.body["status"]; r.status != http.StatusOK || r.body["order_id"] != oid || claims {
				t.Errorf("stock %d: a click on a confirmed order: %d %v, want 200 with the order id only", stockN, r.status, r.body)
			}
		}
		if got := dbRemaining(t, be.dbURL, id); got != stockN-1 {
			t.Errorf("stock %d: remaining in the database %d, want %d", stockN, got, stockN-1)
		}
	}
}

// TestDatabaseRefusal: Redis says yes but the database has no stock left:
// the order ends failed, and Redis gives the stock and the mark back.
func TestDatabaseRefusal(t *testing.T) {
	be := backend{"postgres", redisURL(t), testenv.PostgresURL(t)}
	in := startServe(t, be, testenv.Prefix(t))
	id := in.createActivity(5, 0)
	s, err := store.Open(context.Background(), be.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db, err := sqlDB(be.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`UPDATE activities SET remaining = 0 WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	r := in.grab(id, 77)
	if r.status != http.StatusAccepted {
		t.Fatalf("grab: %d %v", r.status, r.body)
	}
	oid := r.body["order_id"].(string)
	st := in.waitOrders(map[string]int64{oid: 77})
	if st[oid] != "failed" {
		t.Fatalf("order status: got %s, want failed", st[oid])
	}
	o := in.do("GET", "/api/v1/orders/"+oid, user(77), "")
	if o.body["reason"] != "sold_out" {
		t.Errorf("failure reason: got %v, want sold_out", o.body["reason"])
	}
	// The stock and the mark came back exactly once.
	deadline := time.Now().Add(5 * time.Second)
	for in.activity(id)["remaining"].(float64) != 5 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if got := in.activity(id)["remaining"].(float64); got != 5 {
		t.Errorf("redis remaining after compensation: got %v, want 5", got)
	}
	r = in.grab(id, 77)
	if r.status != http.StatusAccepted || r.body["order_id"] == oid {
		t.Errorf("grab after the failure: got %d %v, want a new order", r.status, r.body)
	}
}

// TestRebuildAfterRedisLoss: Redis loses everything (restart without
// persistence); the service rebuilds the activity from the database, keeps
// the buyers, and never sells more than the stock.
func TestRebuildAfterRedisLoss(t *testing.T) {
	srv := testenv.StartRedis(t)
	be := backend{"sqlite", "redis://" + srv.Addr, sqliteURL(t)}
	in := startServe(t, be, testenv.Prefix(t))
	id := in.createActivity(3, 0)
	first := in.grab(id, 1)
	if first.status != http.StatusAccepted {
		t.Fatalf("grab: %d %v", first.status, first.body)
	}
	oid := first.body["order_id"].(string)
	in.waitOrders(map[string]int64{oid: 1})

	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	if err := rdb.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	// A new buyer hits the hole and is told to come back; an instance that
	// sees the hole rebuilds before it accepts again.
	r := in.grab(id, 2)
	if r.status != http.StatusServiceUnavailable || r.code() != "unavailable" {
		t.Fatalf("grab while redis lost the activity: got %d %v, want 503 unavailable", r.status, r.body)
	}
	deadline := time.Now().Add(10 * time.Second)
	for r.status == http.StatusServiceUnavailable && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		r = in.grab(id, 2)
	}
	if r.status != http.StatusAccepted {
		t.Fatalf("a new buyer after the rebuild: got %d %v, want 202", r.status, r.body)
	}
	orders := map[string]int64{oid: 1, r.body["order_id"].(string): 2}
	// The rebuilt Redis knows the first buyer and the stock the database had.
	if again := in.grab(id, 1); again.status != http.StatusOK || again.body["order_id"] != oid {
		t.Errorf("the first buyer after the rebuild: got %d %v, want 200 with order %s", again.status, again.body, oid)
	}
	ks := stock.KeysFor(in.prefix, id)
	if n, err := rdb.Get(context.Background(), ks.Stock).Int64(); n != 1 {
		t.Errorf("rebuilt remaining after one more grab: got %d (%v), want 1", n, err)
	}
	users := []int64{3, 4, 5, 6, 7}
	answered, _ := in.crowd(id, users)
	for uid, ids := range answered {
		for o := range ids {
			orders[o] = uid
		}
	}
	confirmed := 0
	for _, s := range in.waitOrders(orders) {
		if s == "confirmed" {
			confirmed++
		}
	}
	if confirmed != 3 {
		t.Errorf("confirmed orders after the rebuild: got %d, want 3", confirmed)
	}
	if got := dbRemaining(t, be.dbURL, id); got != 0 {
		t.Errorf("database remaining: %d, want 0", got)
	}
}
