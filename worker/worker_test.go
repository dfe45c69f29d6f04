package worker

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/stock"
	"github.com/seckilldev/seckill/store"
)

type fixture struct {
	store  seckill.Store
	engine *stock.Engine
	act    seckill.Activity
}

func newFixture(t *testing.T, stockN int64) *fixture {
	t.Helper()
	return newFixtureOf(t, stockN, 1)
}

// newFixtureOf is newFixture with the stock in buckets.
func newFixtureOf(t *testing.T, stockN int64, buckets int) *fixture {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "w.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() { rdb.Close() })
	e := stock.New(rdb, stock.Config{Prefix: testenv.Prefix(t)})
	t.Cleanup(e.Close)
	a := seckill.Activity{Name: "w", Stock: stockN, StartsAt: time.Now().Add(-time.Minute), EndsAt: time.Now().Add(time.Hour),
		Buckets: buckets}
	if err := st.CreateActivity(ctx, &a); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Load(ctx, a, nil); err != nil {
		t.Fatal(err)
	}
	return &fixture{store: st, engine: e, act: a}
}

// grab accepts grabs of distinct users and returns their order ids.
func (f *fixture) grab(t *testing.T, users ...int64) map[int64]int64 {
	t.Helper()
	orders := map[int64]int64{}
	for _, uid := range users {
		r, err := f.engine.Grab(context.Background(), f.act, uid)
		if err != nil {
			t.Fatal(err)
		}
		orders[uid] = r.OrderID
	}
	return orders
}

func (f *fixture) worker(name string, crash func(string) bool) *Worker {
	w := New(f.store, f.engine, Config{Consumer: name, Batch: 4, Poll: 100 * time.Millisecond,
		ClaimIdle: 300 * time.Millisecond, Discover: 50 * time.Millisecond},
		slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	w.crashAt = crash
	return w
}

// run runs w until cond holds (or 20s pass), then stops it.
func run(t *testing.T, w *Worker, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	stop := func() error { cancel(); return <-done }
	// cond may fail the test: the worker stops before the test ends.
	defer func() {
		if ctx.Err() == nil {
			stop()
		}
	}()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			stop()
			t.Fatal("condition not reached in 20s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) confirmed(t *testing.T) int64 {
	t.Helper()
	buyers, err := f.store.Buyers(context.Background(), f.act.ID)
	if err != nil {
		t.Fatal(err)
	}
	return int64(len(buyers))
}

func (f *fixture) drained(t *testing.T) bool {
	st, err := f.engine.Stats(context.Background(), f.act)
	if err != nil {
		t.Fatal(err)
	}
	return st.Backlog() == 0
}

// TestCrashes: a worker dies after reading a batch and before the commit,
// another after the commit and before the ack; a third claims their entries.
// Every order ends confirmed exactly once.
func TestCrashes(t *testing.T) {
	for _, stage := range []string{"read", "committed"} {
		t.Run(stage, func(t *testing.T) {
			f := newFixture(t, 20)
			f.grab(t, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
			var crashed atomic.Bool
			dying := f.worker("dying", func(s string) bool {
				if s == stage {
					crashed.Store(true)
					return true
				}
				return false
			})
			run(t, dying, crashed.Load)
			if st, _ := f.engine.Stats(context.Background(), f.act); st.Pending == 0 {
				t.Fatalf("the crash left nothing pending: %+v", st)
			}
			wantBefore := int64(0)
			if stage == "committed" {
				wantBefore = 4 // one batch
			}
			if got := f.confirmed(t); got != wantBefore {
				t.Fatalf("confirmed after the crash: got %d, want %d", got, wantBefore)
			}
			heir := f.worker("heir", nil)
			run(t, heir, func() bool { return f.drained(t) })
			if got := f.confirmed(t); got != 10 {
				t.Errorf("confirmed after recovery: got %d, want 10", got)
			}
			a, _ := f.store.Activity(context.Background(), f.act.ID)
			if a.Remaining != 10 {
				t.Errorf("database remaining: got %d, want 10", a.Remaining)
			}
		})
	}
}

// TestPoison: an entry that keeps killing its workers ends as a failed
// order after MaxDeliveries, with its stock given back once.
func TestPoison(t *testing.T) {
	f := newFixture(t, 5)
	oid := f.grab(t, 1)[1]
	for i := range 7 {
		var crashed atomic.Bool
		w := f.worker("w"+string(rune('a'+i)), func(s string) bool {
			if s == "read" {
				crashed.Store(true)
				return true
			}
			return false
		})
		run(t, w, func() bool { return crashed.Load() || f.drained(t) })
		if f.drained(t) {
			break
		}
		time.Sleep(350 * time.Millisecond) // let the entry go idle
	}
	healthy := f.worker("healthy", nil)
	run(t, healthy, func() bool { return f.drained(t) })
	o, err := f.store.Order(context.Background(), oid)
	if err != nil {
		t.Fatal(err)
	}
	if o.Status != seckill.OrderFailed || o.Reason != seckill.ReasonPoison {
		t.Errorf("order: got %s/%s, want failed/poison", o.Status, o.Reason)
	}
	if n, _ := f.engine.Remaining(context.Background(), f.act); n != 5 {
		t.Errorf("redis remaining: got %d, want 5 (stock given back)", n)
	}
}

// TestSoldOutInDatabase: the database holds less stock than Redis; the
// extra orders fail with sold_out and their stock and marks come back.
func TestSoldOutInDatabase(t *testing.T) {
	f := newFixture(t, 10)
	// Two orders that Redis never saw take the database's stock down to 8...
	if _, err := f.store.ApplyOrders(context.Background(), []seckill.OrderRequest{
		{OrderID: 1, ActivityID: f.act.ID, UserID: 901, CreatedAt: time.Now()},
		{OrderID: 2, ActivityID: f.act.ID, UserID: 902, CreatedAt: time.Now()},
	}); err != nil {
		t.Fatal(err)
	}
	// ...while Redis sells all 10.
	users := []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	orders := f.grab(t, users...)
	w := f.worker("w", nil)
	run(t, w, func() bool { return f.drained(t) })
	var confirmed, failed int
	var mu sync.Mutex
	for _, uid := range users {
		o, err := f.store.Order(context.Background(), orders[uid])
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		switch o.Status {
		case seckill.OrderConfirmed:
			confirmed++
		case seckill.OrderFailed:
			failed++
			if o.Reason != seckill.ReasonSoldOut {
				t.Errorf("failure reason %q, want sold_out", o.Reason)
			}
			if _, ok, _ := f.engine.PendingOrder(context.Background(), f.act, orders[uid], uid); ok {
				t.Errorf("failed order %d still marked in redis", orders[uid])
			}
		}
		mu.Unlock()
	}
	if confirmed != 8 || failed != 2 {
		t.Errorf("got %d confirmed and %d failed, want 8 and 2", confirmed, failed)
	}
	if n, _ := f.engine.Remaining(context.Background(), f.act); n != 2 {
		t.Errorf("redis remaining: got %d, want 2 (given back)", n)
	}
}

// TestTransient: the errors the worker retries without end are those of a
// connection or of a lock that another writer held, never a refusal of the
// request itself.
func TestTransient(t *testing.T) {
	for _, c := range []struct {
		err  string
		want bool
	}{
		{"dial tcp 127.0.0.1:5432: connect: connection refused", true},
		{"write: broken pipe", true},
		{"Error 1205 (HY000): Lock wait timeout exceeded; try restarting transaction", true},
		{"sqlite: apply orders: database is locked (5) (SQLITE_BUSY)", true},
		{`ERROR: duplicate key value violates unique constraint "orders_pkey" (SQLSTATE 23505)`, false},
		{"sqlite: constraint failed: UNIQUE constraint failed: orders.id (1555)", false},
	} {
		if got := transient(errors.New(c.err)); got != c.want {
			t.Errorf("transient(%q) = %v, want %v", c.err, got, c.want)
		}
	}
}

// TestLingerGathers: while a crowd's orders arrive and the worker keeps up,
// its rounds begin at least Linger apart, so the crowd is written in a few
// transactions (one per linger, or two when a round finds the stream empty
// and cools it down) rather than one per few milliseconds; orders that come
// one at a time are written at once, whatever the linger. Every order is
// written.
func TestLingerGathers(t *testing.T) {
	start := func(t *testing.T, f *fixture, linger time.Duration) *atomic.Int64 {
		var batches atomic.Int64
		w := New(f.store, f.engine, Config{Consumer: "w", Batch: 4, Linger: linger, Poll: 100 * time.Millisecond,
			Discover: 50 * time.Millisecond}, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
		w.crashAt = func(stage string) bool {
			if stage == "read" {
				batches.Add(1)
			}
			return false
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		})
		return &batches
	}
	waitConfirmed := func(t *testing.T, f *fixture, n int64) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for f.confirmed(t) < n {
			if time.Now().After(deadline) {
				t.Fatalf("confirmed %d of %d orders in 20s", f.confirmed(t), n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	t.Run("crowd", func(t *testing.T) {
		const linger = 200 * time.Millisecond
		f := newFixture(t, 100_000)
		batches := start(t, f, linger)
		began := time.Now()
		var n int64
		for time.Since(began) < time.Second {
			for range 2 * crowdEntries {
				n++
				f.grab(t, n)
			}
			time.Sleep(20 * time.Millisecond)
		}
		elapsed := time.Since(began)
		waitConfirmed(t, f, n)
		limit := 2*int64(elapsed/linger) + 4
		if got := batches.Load(); got > limit {
			t.Errorf("%d orders over %v in %d transactions, want at most %d (linger %v)", n, elapsed.Round(time.Millisecond), got, limit, linger)
		} else {
			t.Logf("%d orders over %v in %d transactions", n, elapsed.Round(time.Millisecond), got)
		}
	})

	t.Run("one at a time", func(t *testing.T) {
		f := newFixture(t, 100)
		start(t, f, time.Hour)
		for n := int64(1); n <= 10; n++ {
			f.grab(t, n)
			waitConfirmed(t, f, n)
		}
	})
}
