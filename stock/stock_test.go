package stock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/stock"
)

func newEngine(t *testing.T) *stock.Engine {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() { rdb.Close() })
	e := stock.New(rdb, stock.Config{Prefix: testenv.Prefix(t)})
	t.Cleanup(e.Close)
	return e
}

func openActivity(id, stockN int64) seckill.Activity {
	now := time.Now()
	return seckill.Activity{ID: id, Name: "t", Stock: stockN, Remaining: stockN,
		StartsAt: now.Add(-time.Minute), EndsAt: now.Add(time.Hour)}
}

func TestGrabNotLoaded(t *testing.T) {
	e := newEngine(t)
	_, err := e.Grab(context.Background(), 1, 7, 100)
	if !errors.Is(err, stock.ErrNotLoaded) {
		t.Fatalf("grab of an unloaded activity: got %v, want ErrNotLoaded", err)
	}
}

func TestGrabWindow(t *testing.T) {
	e := newEngine(t)
	ctx := context.Background()
	now := time.Now()
	early := seckill.Activity{ID: 1, Stock: 5, Remaining: 5, StartsAt: now.Add(time.Hour), EndsAt: now.Add(2 * time.Hour)}
	late := seckill.Activity{ID: 2, Stock: 5, Remaining: 5, StartsAt: now.Add(-2 * time.Hour), EndsAt: now.Add(-time.Hour)}
	for _, a := range []seckill.Activity{early, late} {
		if _, err := e.Load(ctx, a, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.Grab(ctx, 1, 7, 100); seckill.ErrorCode(err) != seckill.ENOTSTARTED {
		t.Errorf("grab before start: got %v, want %s", err, seckill.ENOTSTARTED)
	}
	if _, err := e.Grab(ctx, 2, 7, 101); seckill.ErrorCode(err) != seckill.EENDED {
		t.Errorf("grab after end: got %v, want %s", err, seckill.EENDED)
	}
	for _, id := range []int64{1, 2} {
		if n, _ := e.Remaining(ctx, id); n != 5 {
			t.Errorf("activity %d: remaining %d after refused grabs, want 5", id, n)
		}
	}
}

// TestGrabConcurrent: 200 buyers, stock 10, plus every buyer clicking
// twice: exactly 10 orders, each buyer's replies agree.
func TestGrabConcurrent(t *testing.T) {
	e := newEngine(t)
	ctx := context.Background()
	if ok, err := e.Load(ctx, openActivity(1, 10), nil); err != nil || !ok {
		t.Fatalf("load: %v %v", ok, err)
	}
	var nextOID atomic.Int64
	nextOID.Store(1000)
	var mu sync.Mutex
	orders := map[int64]map[int64]bool{} // uid -> order ids answered
	var soldOut atomic.Int64
	var wg sync.WaitGroup
	for uid := int64(1); uid <= 200; uid++ {
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := e.Grab(ctx, 1, uid, nextOID.Add(1))
				if errors.Is(err, stock.ErrSoldOut) {
					soldOut.Add(1)
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if orders[uid] == nil {
					orders[uid] = map[int64]bool{}
				}
				orders[uid][res.OrderID] = true
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	if len(orders) != 10 {
		t.Errorf("buyers with an order: got %d, want 10", len(orders))
	}
	for uid, ids := range orders {
		if len(ids) != 1 {
			t.Errorf("user %d was told of %d different orders: %v", uid, len(ids), ids)
		}
	}
	if n, _ := e.Remaining(ctx, 1); n != 0 {
		t.Errorf("remaining: got %d, want 0", n)
	}
	n, err := e.Client().XLen(ctx, e.Keys(1).Orders).Result()
	if err != nil || n != 10 {
		t.Errorf("stream entries: got %d (%v), want 10", n, err)
	}
}

func TestCompensateOnce(t *testing.T) {
	e := newEngine(t)
	ctx := context.Background()
	if _, err := e.Load(ctx, openActivity(1, 1), nil); err != nil {
		t.Fatal(err)
	}
	res, err := e.Grab(ctx, 1, 7, 100)
	if err != nil || !res.New || res.Remaining != 0 {
		t.Fatalf("first grab: %+v %v", res, err)
	}
	if _, err := e.Grab(ctx, 1, 8, 101); !errors.Is(err, stock.ErrSoldOut) {
		t.Fatalf("second buyer: got %v, want sold out", err)
	}
	sub := e.Client().Subscribe(ctx, e.EventsChannel())
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, false} {
		got, err := e.Compensate(ctx, 1, 7, 100, 0)
		if err != nil || got != want {
			t.Fatalf("compensate #%d: got %v %v, want %v", i+1, got, err, want)
		}
	}
	select {
	case m := <-sub.Channel():
		if m.Payload != "1" {
			t.Errorf("event payload %q, want 1", m.Payload)
		}
	case <-time.After(2 * time.Second):
		t.Error("no restock event published")
	}
	if n, _ := e.Remaining(ctx, 1); n != 1 {
		t.Errorf("remaining after compensation: got %d, want 1", n)
	}
	if _, ok, _ := e.PendingOrder(ctx, 1, 100, 7, time.Now()); ok {
		t.Error("the failed order is still known to redis")
	}
	// The user may try again and gets a new order.
	res, err = e.Grab(ctx, 1, 7, 102)
	if err != nil || !res.New || res.OrderID != 102 {
		t.Fatalf("grab after compensation: %+v %v", res, err)
	}
	// A late duplicate compensation of the old order changes nothing.
	if got, _ := e.Compensate(ctx, 1, 7, 100, 0); got {
		t.Error("stale compensation gave stock back")
	}
}

func TestLoadOnce(t *testing.T) {
	e := newEngine(t)
	ctx := context.Background()
	a := openActivity(1, 10)
	a.Remaining = 8
	buyers := []seckill.Buyer{{UserID: 1, OrderID: 11}, {UserID: 2, OrderID: 12}}
	if ok, err := e.Load(ctx, a, buyers); err != nil || !ok {
		t.Fatalf("first load: %v %v", ok, err)
	}
	a.Remaining = 10
	if ok, err := e.Load(ctx, a, nil); err != nil || ok {
		t.Fatalf("second load: got %v %v, want false", ok, err)
	}
	if n, _ := e.Remaining(ctx, 1); n != 8 {
		t.Errorf("remaining: got %d, want 8", n)
	}
	res, err := e.Grab(ctx, 1, 2, 99)
	if err != nil || res.New || res.OrderID != 12 {
		t.Errorf("grab by a loaded buyer: got %+v %v, want existing order 12", res, err)
	}
}

// TestPendingOrder: the owner finds a pending order by the buyer mark; an
// admin, without the owner's id, by the order stream around its time.
func TestPendingOrder(t *testing.T) {
	e := newEngine(t)
	ctx := context.Background()
	if _, err := e.Load(ctx, openActivity(1, 3000), nil); err != nil {
		t.Fatal(err)
	}
	for uid := int64(1); uid <= 2500; uid++ {
		if _, err := e.Grab(ctx, 1, uid, 10_000+uid); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	cases := []struct {
		oid, uid, owner int64
		ok              bool
	}{
		{12_000, 2000, 2000, true}, // the owner
		{12_000, 7, 0, false},      // another user
		{12_000, 0, 2000, true},    // an admin: found in the stream, past a page of entries
		{99_999, 0, 0, false},      // no such order
	}
	for _, c := range cases {
		owner, ok, err := e.PendingOrder(ctx, 1, c.oid, c.uid, now)
		if err != nil || ok != c.ok || (ok && owner != c.owner) {
			t.Errorf("PendingOrder(%d, uid %d): got %d %v %v, want %d %v", c.oid, c.uid, owner, ok, err, c.owner, c.ok)
		}
	}
}

// TestReconcile: confirmed orders Redis did not know take their units and
// marks once; a user who grabbed again keeps one unit; with no stock left
// the unit becomes a debt that the next refused order pays.
func TestReconcile(t *testing.T) {
	e := newEngine(t)
	ctx := context.Background()
	if _, err := e.Reconcile(ctx, 1, []seckill.Buyer{{UserID: 1, OrderID: 101}}); !errors.Is(err, stock.ErrNotLoaded) {
		t.Fatalf("reconcile of an unloaded activity: got %v, want ErrNotLoaded", err)
	}
	if _, err := e.Load(ctx, openActivity(1, 4), nil); err != nil {
		t.Fatal(err)
	}
	remaining := func() int64 { n, _ := e.Remaining(ctx, 1); return n }
	confirmed := []seckill.Buyer{{UserID: 1, OrderID: 101}, {UserID: 2, OrderID: 102}}
	for i := range 2 {
		if n, err := e.Reconcile(ctx, 1, confirmed); err != nil || n != int64(2*(1-i)) {
			t.Fatalf("reconcile #%d: got %d %v", i+1, n, err)
		}
	}
	if got := remaining(); got != 2 {
		t.Fatalf("remaining after reconciling 2 orders: %d, want 2", got)
	}
	// User 3 grabbed again (order 203) before the database's order 103 was
	// reconciled: one unit for the user, the mark moves to 103, and the
	// duplicate's compensation changes nothing.
	if _, err := e.Grab(ctx, 1, 3, 203); err != nil {
		t.Fatal(err)
	}
	if n, err := e.Reconcile(ctx, 1, []seckill.Buyer{{UserID: 3, OrderID: 103}}); err != nil || n != 0 {
		t.Fatalf("reconcile of a user who grabbed again: %d %v", n, err)
	}
	if done, _ := e.Compensate(ctx, 1, 3, 203, 103); done {
		t.Error("the duplicate's compensation acted although the mark moved")
	}
	if got := remaining(); got != 1 {
		t.Fatalf("remaining: %d, want 1", got)
	}
	// The last unit goes to user 9 in Redis while the database confirmed
	// user 8: a debt, paid by user 9's refusal.
	if _, err := e.Grab(ctx, 1, 9, 209); err != nil {
		t.Fatal(err)
	}
	if n, err := e.Reconcile(ctx, 1, []seckill.Buyer{{UserID: 8, OrderID: 108}}); err != nil || n != 1 {
		t.Fatalf("reconcile without stock: %d %v", n, err)
	}
	if got := remaining(); got != 0 {
		t.Errorf("remaining went to %d, want 0", got)
	}
	if done, _ := e.Compensate(ctx, 1, 9, 209, 0); !done {
		t.Fatal("the refused order was not compensated")
	}
	if got := remaining(); got != 0 {
		t.Errorf("remaining after paying the debt: %d, want 0", got)
	}
	if debt, _ := e.Client().Get(ctx, e.Keys(1).Debt).Int64(); debt != 0 {
		t.Errorf("debt left: %d", debt)
	}
}
