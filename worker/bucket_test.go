package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/stock"
)

// TestBuckets: the orders of an activity of 16 buckets, accepted by a crowd
// three times the stock, are written from every bucket's stream, each once,
// by a worker that dies after its first commit and one that takes over.
func TestBuckets(t *testing.T) {
	const units, buckets = 60, 16
	f := newFixtureOf(t, units, buckets)
	var mu sync.Mutex
	orders := map[int64]int64{}
	var wg sync.WaitGroup
	for u := range int64(3 * units) {
		wg.Go(func() {
			r, err := f.engine.Grab(context.Background(), f.act, u+1)
			switch {
			case errors.Is(err, stock.ErrSoldOut):
			case err != nil:
				t.Error(err)
			default:
				mu.Lock()
				orders[u+1] = r.OrderID
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(orders) != units {
		t.Fatalf("%d grabs accepted, want %d", len(orders), units)
	}
	var crashed atomic.Bool
	dying := f.worker("dying", func(s string) bool {
		if s == "committed" {
			crashed.Store(true)
			return true
		}
		return false
	})
	run(t, dying, crashed.Load)
	heir := f.worker("heir", nil)
	run(t, heir, func() bool { return f.drained(t) })

	buyers, err := f.store.Buyers(context.Background(), f.act.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(buyers) != units {
		t.Fatalf("%d buyers in the database, want %d", len(buyers), units)
	}
	for _, b := range buyers {
		if orders[b.UserID] != b.OrderID {
			t.Errorf("user %d: order %d in the database, %d answered", b.UserID, b.OrderID, orders[b.UserID])
		}
	}
	a, err := f.store.Activity(context.Background(), f.act.ID)
	if err != nil || a.Remaining != 0 {
		t.Errorf("database remaining %d (%v), want 0", a.Remaining, err)
	}
	// Every bucket's stream was read: each held some of the orders.
	st, err := f.engine.Stats(context.Background(), f.act)
	if err != nil || st.Backlog() != 0 {
		t.Errorf("streams after the drain: %+v %v", st, err)
	}
	used := map[int]bool{}
	for _, oid := range orders {
		used[stock.Bucket(oid, buckets)] = true
	}
	if len(used) < buckets/2 {
		t.Errorf("the orders came from %d buckets of %d", len(used), buckets)
	}
}

// TestBucketsCompensate: an order the database refuses (its stock is
// lower than Redis') gives its unit back to its buyer's home bucket, and
// the buyer may grab again.
func TestBucketsCompensate(t *testing.T) {
	f := newFixtureOf(t, 8, 4)
	// Two orders Redis never saw take the database's stock down to 6.
	if _, err := f.store.ApplyOrders(context.Background(), []seckill.OrderRequest{
		{OrderID: 1, ActivityID: f.act.ID, UserID: 901, CreatedAt: f.act.StartsAt},
		{OrderID: 2, ActivityID: f.act.ID, UserID: 902, CreatedAt: f.act.StartsAt},
	}); err != nil {
		t.Fatal(err)
	}
	users := []int64{1, 2, 3, 4, 5, 6, 7, 8}
	first := f.grab(t, users...)
	run(t, f.worker("w", nil), func() bool { return f.drained(t) })
	if got := f.confirmed(t); got != 8 { // 6 of ours and the two
		t.Fatalf("confirmed %d, want 8", got)
	}
	left, err := f.engine.RemainingByBucket(context.Background(), f.act)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]int64, len(left))
	var refused []int64
	for _, uid := range users {
		o, err := f.store.Order(context.Background(), first[uid])
		if err != nil {
			t.Fatal(err)
		}
		if o.Status == seckill.OrderFailed {
			refused = append(refused, uid)
			want[stock.Home(uid, 4)]++
		}
	}
	if len(refused) != 2 || fmt.Sprint(left) != fmt.Sprint(want) {
		t.Fatalf("refused %v; redis holds %v units by bucket, want %v (each unit in its buyer's home)", refused, left, want)
	}
	for _, uid := range refused {
		if again := f.grab(t, uid)[uid]; again == first[uid] {
			t.Errorf("user %d grabbed again and got the failed order %d", uid, again)
		}
	}
}
