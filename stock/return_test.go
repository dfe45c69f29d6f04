package stock_test

import (
	"context"
	"testing"
	"time"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/internal/rediscount"
	"github.com/seckilldev/seckill/stock"
)

// ret is the return of order oid of user uid in activity 1.
func ret(oid, uid int64, rebuy bool) seckill.Return {
	return seckill.Return{OrderID: oid, ActivityID: 1, UserID: uid, Status: seckill.OrderCancelled, Rebuy: rebuy}
}

func checkReturn(t *testing.T, e *stock.Engine, r seckill.Return, want stock.ReturnResult) {
	t.Helper()
	got, err := e.Return(context.Background(), r)
	if err != nil || got != want {
		t.Fatalf("Return(order %d) = %v, %v; want %v", r.OrderID, got, err, want)
	}
}

// TestReturn: a returned unit comes back once, whatever the number of
// calls; with rebuy the buyer may grab again, without they keep their
// (returned) order; a debt is paid before the stock grows; every return
// moves the epoch and announces the restock.
func TestReturn(t *testing.T) {
	forEachServer(t, stock.Config{}, func(t *testing.T, e *stock.Engine, _ *rediscount.Counter) {
		ctx := context.Background()
		a := seckill.Activity{ID: 1}
		k := e.Keys(a)[0]
		checkReturn(t, e, ret(seckill.OrderID(1, 5), 7, true), stock.ReturnNotLoaded)
		if n := e.Client().Exists(ctx, k.Returned, k.Meta).Val(); n != 0 {
			t.Errorf("Return of an unloaded activity wrote %d keys", n)
		}

		load(t, e, openActivity(1, 3), nil)
		seven, eight, nine := grab(t, e, a, 7).OrderID, grab(t, e, a, 8).OrderID, grab(t, e, a, 9).OrderID
		remaining := func() int64 { n, _ := e.Remaining(ctx, a); return n }
		epoch := func() string { return e.Client().HGet(ctx, k.Meta, "epoch").Val() }
		sub := e.Client().Subscribe(ctx, e.EventsChannel())
		defer sub.Close()
		if _, err := sub.Receive(ctx); err != nil {
			t.Fatal(err)
		}

		before := epoch()
		checkReturn(t, e, ret(seven, 7, true), stock.Returned)
		if got := remaining(); got != 1 {
			t.Errorf("remaining after a return: %d, want 1", got)
		}
		if epoch() == before {
			t.Error("the epoch did not move")
		}
		select {
		case m := <-sub.Channel():
			if m.Payload != "1" {
				t.Errorf("event %q, want 1", m.Payload)
			}
		case <-time.After(10 * time.Second):
			t.Error("no restock event published")
		}
		before = epoch()
		for range 3 {
			checkReturn(t, e, ret(seven, 7, true), stock.AlreadyReturned)
		}
		if got := remaining(); got != 1 || epoch() != before {
			t.Errorf("after repeated returns: remaining %d, epoch moved %v; want 1, no", got, epoch() != before)
		}
		// Rebuy: user 7 grabs again and gets a new order; a late return of
		// the old order leaves the new mark alone.
		again := grab(t, e, a, 7)
		if !again.New || again.OrderID <= nine {
			t.Fatalf("grab after the return: %+v, want a new order", again)
		}

		// Without rebuy the mark stays: user 8 is answered with the
		// returned order.
		checkReturn(t, e, ret(eight, 8, false), stock.Returned)
		if got := remaining(); got != 1 {
			t.Errorf("remaining: %d, want 1", got)
		}
		if res := grab(t, e, a, 8); res.New || res.OrderID != eight {
			t.Errorf("grab by a buyer without rebuy: %+v, want their returned order %d", res, eight)
		}

		// A debt (a unit Redis sold that the database had given to
		// another) is paid first: the stock stays.
		if err := e.Client().Set(ctx, k.Debt, 1, 0).Err(); err != nil {
			t.Fatal(err)
		}
		checkReturn(t, e, ret(nine, 9, true), stock.Returned)
		if got, debt := remaining(), e.Client().Get(ctx, k.Debt).Val(); got != 1 || debt != "0" {
			t.Errorf("after a return with a debt: remaining %d, debt %s; want 1, 0", got, debt)
		}
		if _, ok, _ := e.PendingOrder(ctx, a, nine, 9); ok {
			t.Error("the mark of a returned order stayed although the activity has rebuy")
		}

		// An order id of another range (no mark can name it) comes back
		// once too.
		other := seckill.OrderID(2, 42)
		checkReturn(t, e, ret(other, 10, true), stock.Returned)
		checkReturn(t, e, ret(other, 10, true), stock.AlreadyReturned)
		checkReturn(t, e, ret(seckill.OrderID(1, 42), 10, true), stock.Returned) // its local part is no receipt of it
		if got := remaining(); got != 3 {
			t.Errorf("remaining: %d, want 3", got)
		}
		if res := grab(t, e, a, 7); res.New || res.OrderID != again.OrderID {
			t.Errorf("user 7's new order lost its mark: %+v", res)
		}
	})
}

// TestReturnAfterRebuild: the crash between the database and Redis halves
// of a return. Redis is rebuilt from a database snapshot that holds the
// return (its unit in remaining, its receipt in Returned): the repaired
// Redis half changes nothing. A return the snapshot did not hold still
// comes back; a load that loses the race to another loads none of its
// receipts.
func TestReturnAfterRebuild(t *testing.T) {
	forEachServer(t, stock.Config{}, func(t *testing.T, e *stock.Engine, _ *rediscount.Counter) {
		ctx := context.Background()
		k := e.Keys(seckill.Activity{ID: 1})[0]
		id := func(n int64) int64 { return seckill.OrderID(1, n) }
		a := openActivity(1, 3)
		a.Remaining = 2 // order 1 live; order 2 returned
		// A receipt set left over from before Redis lost the activity is
		// replaced by the snapshot's.
		if err := e.Client().SAdd(ctx, k.Returned, "77").Err(); err != nil {
			t.Fatal(err)
		}
		load(t, e, a, []seckill.Buyer{{UserID: 1, OrderID: id(1)}},
			stock.ReturnedOrders([]int64{id(2), seckill.OrderID(7, 1)}))
		if got := e.Client().SMembers(ctx, k.Returned).Val(); len(got) != 2 {
			t.Errorf("receipts after the load: %v, want order 2's and the foreign id's", got)
		}
		checkReturn(t, e, ret(id(2), 2, true), stock.AlreadyReturned)
		checkReturn(t, e, ret(seckill.OrderID(7, 1), 3, true), stock.AlreadyReturned)
		checkReturn(t, e, ret(id(77), 4, true), stock.Returned) // not a receipt any more
		if n, _ := e.Remaining(ctx, a); n != 3 {
			t.Errorf("remaining: %d, want 3", n)
		}

		// A second load (the activity is loaded already) stages nothing.
		if ok, err := e.Load(ctx, a, nil, stock.ReturnedOrders([]int64{id(1)})); err != nil || ok {
			t.Fatalf("second load: %v, %v", ok, err)
		}
		checkReturn(t, e, ret(id(1), 1, true), stock.Returned)
		// Another process's load that read its snapshot first, then lost
		// to this one, also leaves nothing behind.
		many := make([]int64, 2500)
		for i := range many {
			many[i] = id(int64(100 + i))
		}
		if err := e.Client().Del(ctx, k.Meta).Err(); err != nil {
			t.Fatal(err)
		}
		load(t, e, a, nil, stock.ReturnedOrders(many))
		if n := e.Client().SCard(ctx, k.Returned).Val(); n != int64(len(many)) {
			t.Errorf("%d receipts loaded, want %d", n, len(many))
		}
		if ok, _ := e.Load(ctx, a, nil, stock.ReturnedOrders([]int64{id(5)})); ok {
			t.Fatal("load of a loaded activity")
		}
		staged, _, err := e.Client().Scan(ctx, 0, k.Returned+":load:*", 1000).Result()
		if err != nil || len(staged) != 0 {
			t.Errorf("staged receipts left behind: %v %v", staged, err)
		}
	})
}

// TestReconcileSkipsReturned: an order the caller read as confirmed whose
// unit came back since is not taken again.
func TestReconcileSkipsReturned(t *testing.T) {
	forEachServer(t, stock.Config{}, func(t *testing.T, e *stock.Engine, _ *rediscount.Counter) {
		ctx := context.Background()
		a := seckill.Activity{ID: 1}
		load(t, e, openActivity(1, 2), nil)
		o := grab(t, e, a, 1).OrderID
		checkReturn(t, e, ret(o, 1, true), stock.Returned)
		if n, err := e.Reconcile(ctx, a, []seckill.Buyer{{UserID: 1, OrderID: o}, {UserID: 2, OrderID: seckill.OrderID(1, 1<<30)}}); err != nil || n != 1 {
			t.Fatalf("Reconcile = %d, %v; want only the unknown order taken", n, err)
		}
		if rem, _ := e.Remaining(ctx, a); rem != 1 {
			t.Errorf("remaining: %d, want 1", rem)
		}
		if _, ok, _ := e.PendingOrder(ctx, a, o, 1); ok {
			t.Error("the returned order's mark came back")
		}
	})
}

// TestRetireReturned: retiring an activity deletes its receipts.
func TestRetireReturned(t *testing.T) {
	forEachServer(t, stock.Config{}, func(t *testing.T, e *stock.Engine, _ *rediscount.Counter) {
		ctx := context.Background()
		a := openActivity(1, 2)
		a.StartsAt, a.EndsAt = a.StartsAt.Add(-2*time.Hour), time.Now().Add(-time.Hour)
		load(t, e, a, nil, stock.ReturnedOrders([]int64{seckill.OrderID(1, 3)}))
		if ok, err := e.Retire(ctx, a, time.Minute); err != nil || !ok {
			t.Fatalf("Retire = %v, %v", ok, err)
		}
		k := e.Keys(a)[0]
		if n := e.Client().Exists(ctx, k.Returned, k.Meta).Val(); n != 0 {
			t.Errorf("%d keys left after Retire, want none", n)
		}
	})
}

func TestReturnResultString(t *testing.T) {
	for r, want := range map[stock.ReturnResult]string{
		stock.Returned: "returned", stock.AlreadyReturned: "already returned", stock.ReturnNotLoaded: "not loaded", 9: "ReturnResult(9)",
	} {
		if got := r.String(); got != want {
			t.Errorf("%d: %q, want %q", int(r), got, want)
		}
	}
}
