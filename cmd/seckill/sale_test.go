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
// and on Redis Cluster, with the stock in one bucket and in 16.
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
			for _, buckets := range []int{1, 16} {
				concurrentBuyers(t, in, be, buckets)
			}
		})
	}
}

func concurrentBuyers(t *testing.T, in *instance, be backend, buckets int) {
	id := in.createBucketed(10, 0, buckets)
	users := make([]int64, 200)
	for i := range users {
		users[i] = int64(i + 1)
	}
	answered, statuses := in.crowd(id, users)
	if statuses[http.StatusAccepted] != 10 || statuses[http.StatusConflict] != 190 {
		t.Errorf("%d buckets: replies: got %v, want 10 accepted and 190 sold out", buckets, statuses)
	}
	soldOutAfter(t, in, be, id, map[string]int64{}, answered, 10)
	if got := in.activity(id)["remaining"].(float64); got != 0 {
		t.Errorf("%d buckets: remaining in redis: got %v, want 0", buckets, got)
	}
}

// TestOneUserFiftyClicks: one user grabbing 50 times at once gets one order,
// and every reply names it.
func TestOneUserFiftyClicks(t *testing.T) {
	be := backend{"sqlite", redisURL(t), sqliteURL(t)}
	in := startServe(t, be, testenv.Prefix(t))
	for _, c := range []struct {
		stockN  int64
		buckets int
	}{{1, 1}, {100, 1}, {1, 16}, {100, 16}} {
		stockN := c.stockN
		id := in.createBucketed(stockN, 0, c.buckets)
		users := make([]int64, 50)
		for i := range users {
			users[i] = 4242
		}
		answered, statuses := in.crowd(id, users)
		if len(answered[4242]) != 1 {
			t.Fatalf("stock %d (%d buckets): the user was told of %d orders: %v (replies %v)", stockN, c.buckets, len(answered[4242]), answered, statuses)
		}
		if statuses[http.StatusAccepted] != 1 || statuses[http.StatusOK] != 49 {
			t.Errorf("stock %d (%d buckets): replies %v, want one 202 and 49 200", stockN, c.buckets, statuses)
		}
		for oid := range answered[4242] {
			if s := in.waitOrders(map[string]int64{oid: 4242})[oid]; s != "confirmed" {
				t.Errorf("stock %d (%d buckets): order status %s", stockN, c.buckets, s)
			}
			// Clicking again names the order and claims no state of it (it
			// said "pending" of confirmed and paid orders).
			r := in.grab(id, 4242)
			if _, claims := r.body["status"]; r.status != http.StatusOK || r.body["order_id"] != oid || claims {
				t.Errorf("stock %d (%d buckets): a click on a confirmed order: %d %v, want 200 with the order id only", stockN, c.buckets, r.status, r.body)
			}
		}
		if got := dbRemaining(t, be.dbURL, id); got != stockN-1 {
			t.Errorf("stock %d (%d buckets): remaining in the database %d, want %d", stockN, c.buckets, got, stockN-1)
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
	if n, err := rdb.HGet(context.Background(), ks.Meta, stock.MetaLeft).Int64(); n != 1 {
		t.Errorf("rebuilt remaining after one more grab: got %d (%v), want 1", n, err)
	}
	answered, _ := in.crowd(id, []int64{3, 4, 5, 6, 7})
	soldOutAfter(t, in, be, id, orders, answered, 3)
}

// soldOutAfter waits for the orders and those a crowd was answered, and
// checks that want of them end confirmed and the database has no unit
// left.
func soldOutAfter(t *testing.T, in *instance, be backend, id int64, orders map[string]int64, answered map[int64]map[string]bool, want int) {
	t.Helper()
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
	if confirmed != want {
		t.Errorf("confirmed orders: got %d, want %d", confirmed, want)
	}
	if got := dbRemaining(t, be.dbURL, id); got != 0 {
		t.Errorf("database remaining: %d, want 0", got)
	}
}

// TestRebuildBuckets: Redis loses every bucket of a 16-bucket sale; the
// service rebuilds them from the database, its buyers in their home
// buckets, and sells exactly the rest.
func TestRebuildBuckets(t *testing.T) {
	srv := testenv.StartRedis(t)
	be := backend{"sqlite", "redis://" + srv.Addr, sqliteURL(t)}
	in := startServe(t, be, testenv.Prefix(t))
	id := in.createBucketed(20, 0, 16)
	first, _ := in.crowd(id, []int64{1, 2, 3, 4, 5})
	orders := map[string]int64{}
	for uid, ids := range first {
		for oid := range ids {
			orders[oid] = uid
		}
	}
	in.waitOrders(orders)

	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	if err := rdb.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	r := in.grab(id, 6)
	deadline := time.Now().Add(10 * time.Second)
	for r.status == http.StatusServiceUnavailable && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		r = in.grab(id, 6)
	}
	if r.status != http.StatusAccepted {
		t.Fatalf("a new buyer after the rebuild: got %d %v, want 202", r.status, r.body)
	}
	orders[r.body["order_id"].(string)] = 6
	for oid, uid := range orders {
		if uid == 6 {
			continue
		}
		if again := in.grab(id, uid); again.status != http.StatusOK || again.body["order_id"] != oid {
			t.Errorf("buyer %d after the rebuild: got %d %v, want 200 with order %s", uid, again.status, again.body, oid)
		}
	}
	users := make([]int64, 60)
	for i := range users {
		users[i] = int64(100 + i)
	}
	answered, statuses := in.crowd(id, users)
	if statuses[http.StatusAccepted] != 14 {
		t.Errorf("after the rebuild: replies %v, want 14 accepted (20 less the 6 sold)", statuses)
	}
	soldOutAfter(t, in, be, id, orders, answered, 20)
}
