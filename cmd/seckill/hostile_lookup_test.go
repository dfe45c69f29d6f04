package main

import (
	"database/sql"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/internal/testenv"
)

// TestHostileOrderLookups: a flood of made-up order ids (issue 28: each
// lookup was a database transaction, and a flood of them at 715 a second
// slowed the orders' confirmation ninefold). 2,000 lookups from 64
// connections, of random ids and of ids just beyond the sale's last order,
// cost PostgreSQL no transaction of their own, each is answered 404 no
// sooner than --miss-delay (100 ms by default), and the buyer's own order
// is answered meanwhile. The transactions are PostgreSQL's count for the
// test's database, read once serve's connections are gone (a backend
// flushes its statistics as it exits): the flood runs on a second serve,
// started after the count and stopped before the next.
func TestHostileOrderLookups(t *testing.T) {
	dbURL := testenv.PostgresURL(t)
	redisAddr, prefix := testenv.RedisAddr(t), testenv.Prefix(t)
	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	transactions := func() int64 {
		t.Helper()
		testenv.WaitFor(t, "serve's database connections closed", func() bool {
			var n int
			err := db.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&n)
			return err == nil && n == 0
		})
		var n int64
		if err := db.QueryRow(`SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	stop := func(h *hostile) {
		h.proc.signal(syscall.SIGTERM)
		<-h.proc.done
	}

	h := serveProcess(t, redisAddr, dbURL, prefix)
	id := h.createActivity(100, -time.Second)
	r := h.grab(id, 1)
	if r.status != http.StatusAccepted {
		t.Fatalf("grab: %d %v", r.status, r.body)
	}
	oid := r.body["order_id"].(string)
	h.waitOrders(map[string]int64{oid: 1})
	order, _ := strconv.ParseInt(oid, 10, 64)
	stop(h)
	before := transactions()

	h = serveProcess(t, redisAddr, dbURL, prefix)
	const lookups, conns = 2000, 64
	var next, early atomic.Int64
	var wg sync.WaitGroup
	for c := range conns {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 3))
			for next.Add(1) <= lookups {
				ids := []int64{1 + rng.Int64N(1<<63-1), order + 1 + rng.Int64N(8000)}
				made := ids[rng.IntN(2)]
				req, _ := http.NewRequest("GET", h.url+"/api/v1/orders/"+strconv.FormatInt(made, 10), nil)
				req.Header.Set("X-User-ID", strconv.FormatInt(1+rng.Int64N(1000), 10))
				began := time.Now()
				resp, err := h.client.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusNotFound {
					t.Errorf("order %d (made up): %d, want 404", made, resp.StatusCode)
					return
				}
				if time.Since(began) < 100*time.Millisecond {
					early.Add(1)
				}
			}
		})
	}
	began := time.Now()
	if r := h.do("GET", "/api/v1/orders/"+oid, user(1), ""); r.status != http.StatusOK || r.body["status"] != string(seckill.OrderConfirmed) {
		t.Errorf("the buyer's own order during the flood: %d %v, want 200 confirmed", r.status, r.body)
	}
	wg.Wait()
	took := time.Since(began)
	stop(h)
	n := transactions() - before
	t.Logf("%d lookups of made-up ids from %d connections in %v; %d transactions of the database in the second serve's whole life (its start and background jobs included)",
		lookups, conns, took.Round(time.Millisecond), n)
	if early.Load() > 0 {
		t.Errorf("%d of %d lookups of made-up ids answered 404 sooner than --miss-delay (100 ms)", early.Load(), lookups)
	}
	// One transaction a lookup, as before, would be 2,000; serve's start,
	// its expiry job and a listing of the activities a second are a few
	// dozen.
	if n > lookups/10 {
		t.Errorf("%d database transactions for %d lookups of made-up ids, want far fewer than one a lookup", n, lookups)
	}
}
