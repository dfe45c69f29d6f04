package stock_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/internal/rediscount"
	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/stock"
)

// servers are the Redis servers every script must run on: the real one,
// and the embedded one of `seckill demo` (miniredis, gopher-lua).
var servers = []struct {
	name string
	addr func(t *testing.T) string
}{
	{"redis", func(t *testing.T) string { return testenv.RedisAddr(t) }},
	{"miniredis", func(t *testing.T) string { return miniredis.RunT(t).Addr() }},
}

// forEachServer runs fn on an engine of each server, under a fresh prefix.
func forEachServer(t *testing.T, cfg stock.Config, fn func(t *testing.T, e *stock.Engine, cmds *rediscount.Counter)) {
	for _, s := range servers {
		t.Run(s.name, func(t *testing.T) {
			e, cmds := newEngineAt(t, s.addr(t), cfg)
			fn(t, e, cmds)
		})
	}
}

func newEngine(t *testing.T) *stock.Engine {
	t.Helper()
	e, _ := newEngineAt(t, testenv.RedisAddr(t), stock.Config{})
	return e
}

func newEngineAt(t testing.TB, addr string, cfg stock.Config) (*stock.Engine, *rediscount.Counter) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { rdb.Close() })
	cmds := &rediscount.Counter{}
	rdb.AddHook(cmds)
	cfg.Prefix = testenv.Prefix(t)
	e := stock.New(rdb, cfg)
	t.Cleanup(e.Close)
	return e, cmds
}

func openActivity(id, stockN int64) seckill.Activity {
	now := time.Now().Truncate(time.Millisecond)
	return seckill.Activity{ID: id, Name: "t", Stock: stockN, Remaining: stockN,
		StartsAt: now.Add(-time.Minute), EndsAt: now.Add(time.Hour)}
}

func load(t *testing.T, e *stock.Engine, a seckill.Activity, buyers []seckill.Buyer, opts ...stock.LoadOption) {
	t.Helper()
	if ok, err := e.Load(context.Background(), a, buyers, opts...); err != nil || !ok {
		t.Fatalf("load activity %d: %v %v", a.ID, ok, err)
	}
}

func grab(t *testing.T, e *stock.Engine, a seckill.Activity, uid int64) stock.Result {
	t.Helper()
	res, err := e.Grab(context.Background(), a, uid)
	if err != nil {
		t.Fatalf("grab of activity %d by user %d: %v", a.ID, uid, err)
	}
	return res
}

func TestGrabNotLoaded(t *testing.T) {
	forEachServer(t, stock.Config{}, func(t *testing.T, e *stock.Engine, _ *rediscount.Counter) {
		_, err := e.Grab(context.Background(), seckill.Activity{ID: 1}, 7)
		if !errors.Is(err, stock.ErrNotLoaded) {
			t.Fatalf("grab of an unloaded activity: got %v, want ErrNotLoaded", err)
		}
	})
}

func TestGrabWindow(t *testing.T) {
	forEachServer(t, stock.Config{}, func(t *testing.T, e *stock.Engine, _ *rediscount.Counter) {
		ctx := context.Background()
		now := time.Now()
		early := seckill.Activity{ID: 1, Stock: 5, Remaining: 5, StartsAt: now.Add(time.Hour), EndsAt: now.Add(2 * time.Hour)}
		late := seckill.Activity{ID: 2, Stock: 5, Remaining: 5, StartsAt: now.Add(-2 * time.Hour), EndsAt: now.Add(-time.Hour)}
		for _, a := range []seckill.Activity{early, late} {
			load(t, e, a, nil)
		}
		if _, err := e.Grab(ctx, early, 7); seckill.ErrorCode(err) != seckill.ENOTSTARTED {
			t.Errorf("grab before start: got %v, want %s", err, seckill.ENOTSTARTED)
		}
		if _, err := e.Grab(ctx, late, 7); seckill.ErrorCode(err) != seckill.EENDED {
			t.Errorf("grab after end: got %v, want %s", err, seckill.EENDED)
		}
		for _, a := range []seckill.Activity{early, late} {
			if n, _ := e.Remaining(ctx, a); n != 5 {
				t.Errorf("activity %d: remaining %d after refused grabs, want 5", a.ID, n)
			}
		}
	})
}

// TestGrabConcurrent: 200 buyers, stock 10, plus every buyer clicking
// twice: exactly 10 orders, each buyer's replies agree, and each order id
// names the activity, is unique, and leads to its stream entry.
func TestGrabConcurrent(t *testing.T) {
	forEachServer(t, stock.Config{}, func(t *testing.T, e *stock.Engine, _ *rediscount.Counter) {
		ctx := context.Background()
		a := openActivity(77, 10)
		load(t, e, a, nil)
		var mu sync.Mutex
		orders := map[int64]map[int64]bool{} // uid -> order ids answered
		var wg sync.WaitGroup
		for uid := int64(1); uid <= 200; uid++ {
			for range 2 {
				wg.Go(func() {
					res, err := e.Grab(ctx, a, uid)
					if errors.Is(err, stock.ErrSoldOut) {
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
				})
			}
		}
		wg.Wait()
		if len(orders) != 10 {
			t.Errorf("buyers with an order: got %d, want 10", len(orders))
		}
		owner := map[int64]int64{}
		for uid, ids := range orders {
			if len(ids) != 1 {
				t.Errorf("user %d was told of %d different orders: %v", uid, len(ids), ids)
			}
			for id := range ids {
				if seckill.OrderActivity(id) != a.ID {
					t.Errorf("order %d names activity %d, want %d", id, seckill.OrderActivity(id), a.ID)
				}
				if other, dup := owner[id]; dup {
					t.Errorf("order %d told to users %d and %d", id, other, uid)
				}
				owner[id] = uid
			}
		}
		if n, _ := e.Remaining(ctx, a); n != 0 {
			t.Errorf("remaining: got %d, want 0", n)
		}
		entries, err := e.Client().XRange(ctx, e.Keys(a)[0].Orders, "-", "+").Result()
		if err != nil || len(entries) != 10 {
			t.Fatalf("stream entries: got %d (%v), want 10", len(entries), err)
		}
		for _, m := range entries {
			req, err := stock.ParseEntry(a.ID, m)
			if err != nil {
				t.Fatal(err)
			}
			if owner[req.OrderID] != req.UserID || stock.EntryID(a.StartsAt, req.OrderID) != m.ID {
				t.Errorf("entry %s: order %d of user %d; want an answered order whose entry id it is (%s)",
					m.ID, req.OrderID, req.UserID, stock.EntryID(a.StartsAt, req.OrderID))
			}
			if !req.CreatedAt.Equal(seckill.OrderTime(a.StartsAt, req.OrderID)) || req.CreatedAt.Before(a.StartsAt) {
				t.Errorf("entry %s: created at %v, want the order id's time %v", m.ID, req.CreatedAt, seckill.OrderTime(a.StartsAt, req.OrderID))
			}
		}
	})
}

// TestOrderIDEdge: the largest activity id and a local id at the top of its
// 39 bits make order ids at the top of int64, exact on both servers; more
// than 8 grabs in one millisecond borrow from the next ones and stay
// increasing.
func TestOrderIDEdge(t *testing.T) {
	forEachServer(t, stock.Config{}, func(t *testing.T, e *stock.Engine, _ *rediscount.Counter) {
		ctx := context.Background()
		a := openActivity(seckill.MaxActivityID, 100)
		load(t, e, a, nil)
		if err := e.Client().HSet(ctx, e.Keys(a)[0].Meta, "seq", seckill.MaxOrderLocal-3).Err(); err != nil {
			t.Fatal(err)
		}
		for i, want := range []int64{1<<63 - 3, 1<<63 - 2, 1<<63 - 1} {
			if got := grab(t, e, a, int64(i+1)).OrderID; got != want {
				t.Errorf("order %d: got %d, want %d", i+1, got, want)
			}
		}
		if got, err := e.Client().HGet(ctx, e.Keys(a)[0].Buyers, "3").Result(); err != nil || got != "549755813887" {
			t.Errorf("buyer mark: got %q %v, want the local id 549755813887", got, err)
		}

		b := openActivity(5, 100)
		load(t, e, b, nil)
		var ids []int64
		for uid := range int64(40) {
			ids = append(ids, grab(t, e, b, uid+1).OrderID)
		}
		for i := 1; i < len(ids); i++ {
			if ids[i] <= ids[i-1] {
				t.Fatalf("order ids not increasing: %d after %d", ids[i], ids[i-1])
			}
		}
	})
}

func TestCompensateOnce(t *testing.T) {
	forEachServer(t, stock.Config{}, func(t *testing.T, e *stock.Engine, _ *rediscount.Counter) {
		ctx := context.Background()
		a := openActivity(1, 1)
		load(t, e, a, nil)
		res := grab(t, e, a, 7)
		if !res.New || res.Remaining != 0 {
			t.Fatalf("first grab: %+v", res)
		}
		first := res.OrderID
		if _, err := e.Grab(ctx, a, 8); !errors.Is(err, stock.ErrSoldOut) {
			t.Fatalf("second buyer: got %v, want sold out", err)
		}
		sub := e.Client().Subscribe(ctx, e.EventsChannel())
		defer sub.Close()
		if _, err := sub.Receive(ctx); err != nil {
			t.Fatal(err)
		}
		for i, want := range []bool{true, false} {
			got, err := e.Compensate(ctx, a, 7, first, 0)
			if err != nil || got != want {
				t.Fatalf("compensate #%d: got %v %v, want %v", i+1, got, err, want)
			}
		}
		select {
		case m := <-sub.Channel():
			if m.Payload != "1" {
				t.Errorf("event payload %q, want 1", m.Payload)
			}
		case <-time.After(10 * time.Second):
			t.Error("no restock event published")
		}
		if n, _ := e.Remaining(ctx, a); n != 1 {
			t.Errorf("remaining after compensation: got %d, want 1", n)
		}
		if _, ok, _ := e.PendingOrder(ctx, a, first, 7); ok {
			t.Error("the failed order is still known to redis")
		}
		// The user may try again and gets a new order.
		res = grab(t, e, a, 7)
		if !res.New || res.OrderID <= first {
			t.Fatalf("grab after compensation: %+v, want a new order after %d", res, first)
		}
		// A late duplicate compensation of the old order changes nothing.
		if got, _ := e.Compensate(ctx, a, 7, first, 0); got {
			t.Error("stale compensation gave stock back")
		}
	})
}

func TestLoadOnce(t *testing.T) {
	forEachServer(t, stock.Config{}, func(t *testing.T, e *stock.Engine, _ *rediscount.Counter) {
		ctx := context.Background()
		a := openActivity(1, 10)
		a.Remaining = 8
		buyers := []seckill.Buyer{{UserID: 1, OrderID: seckill.OrderID(1, 11)}, {UserID: 2, OrderID: seckill.OrderID(1, 12)}}
		load(t, e, a, buyers)
		a.Remaining = 10
		if ok, err := e.Load(ctx, a, nil); err != nil || ok {
			t.Fatalf("second load: got %v %v, want false", ok, err)
		}
		if n, _ := e.Remaining(ctx, a); n != 8 {
			t.Errorf("remaining: got %d, want 8", n)
		}
		if res := grab(t, e, a, 2); res.New || res.OrderID != seckill.OrderID(1, 12) {
			t.Errorf("grab by a loaded buyer: got %+v, want existing order %d", res, seckill.OrderID(1, 12))
		}
	})
}

// TestLoadContinuesPastIDs: a (re)load issues ids past the highest one the
// database knows (the buyers, and OrdersAfter for failed orders), and past
// the last entry id of a stream that outlived the rest of the activity.
func TestLoadContinuesPastIDs(t *testing.T) {
	forEachServer(t, stock.Config{}, func(t *testing.T, e *stock.Engine, _ *rediscount.Counter) {
		ctx := context.Background()
		// Ids far ahead of the clock, as after a burst of borrowing.
		const ahead = 50_000_000
		load(t, e, openActivity(1, 10), []seckill.Buyer{{UserID: 1, OrderID: seckill.OrderID(1, 500)}},
			stock.OrdersAfter(seckill.OrderID(1, ahead)))
		if got := grab(t, e, seckill.Activity{ID: 1}, 2).OrderID; got != seckill.OrderID(1, ahead+1) {
			t.Errorf("after OrdersAfter: got order %d, want %d", got, seckill.OrderID(1, ahead+1))
		}
		load(t, e, openActivity(2, 10), []seckill.Buyer{{UserID: 1, OrderID: seckill.OrderID(2, ahead)}},
			stock.OrdersAfter(seckill.OrderID(2, 7)))
		if got := grab(t, e, seckill.Activity{ID: 2}, 2).OrderID; got != seckill.OrderID(2, ahead+1) {
			t.Errorf("after the buyers: got order %d, want %d", got, seckill.OrderID(2, ahead+1))
		}

		// Redis keeps only the stream (its last entry deleted, too), and
		// the database knows nothing: ids continue past the stream's.
		a := openActivity(3, 10)
		load(t, e, a, nil)
		k := e.Keys(a)[0]
		if err := e.Client().HSet(ctx, k.Meta, "seq", ahead).Err(); err != nil {
			t.Fatal(err)
		}
		last := grab(t, e, a, 1).OrderID
		if err := e.Client().XDel(ctx, k.Orders, stock.EntryID(a.StartsAt, last)).Err(); err != nil {
			t.Fatal(err)
		}
		if err := e.Client().Del(ctx, k.Meta, k.Buyers).Err(); err != nil {
			t.Fatal(err)
		}
		load(t, e, a, nil)
		if got := grab(t, e, a, 2).OrderID; got <= last {
			t.Errorf("after a reload over the stream: got order %d, want more than %d", got, last)
		}
	})
}

// TestPendingOrder: an order not yet written is found in one command, by
// the owner (their buyer mark) or an admin (its stream entry, whose id the
// order id gives), among thousands.
func TestPendingOrder(t *testing.T) {
	forEachServer(t, stock.Config{}, func(t *testing.T, e *stock.Engine, cmds *rediscount.Counter) {
		ctx := context.Background()
		a := openActivity(1, 3000)
		load(t, e, a, nil)
		var target int64
		var wg sync.WaitGroup
		var mu sync.Mutex
		for uid := int64(1); uid <= 2500; uid++ {
			wg.Go(func() {
				res, err := e.Grab(ctx, a, uid)
				if err != nil {
					t.Error(err)
				}
				if uid == 2000 {
					mu.Lock()
					target = res.OrderID
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		cases := []struct {
			oid, uid, owner int64
			ok              bool
		}{
			{target, 2000, 2000, true},                                       // the owner
			{target, 7, 0, false},                                            // another user
			{target, 0, 2000, true},                                          // an admin
			{seckill.OrderID(1, 1<<38), 0, 0, false},                         // no such order
			{seckill.OrderID(1, 1<<38), 2000, 0, false},                      // no such order of the user
			{seckill.OrderID(2, seckill.OrderLocal(target)), 2000, 0, false}, // another activity's id
		}
		for _, c := range cases {
			before := cmds.N()
			owner, ok, err := e.PendingOrder(ctx, a, c.oid, c.uid)
			if err != nil || ok != c.ok || (ok && owner != c.owner) {
				t.Errorf("PendingOrder(%d, uid %d): got %d %v %v, want %d %v", c.oid, c.uid, owner, ok, err, c.owner, c.ok)
			}
			if n := cmds.N() - before; n > 1 {
				t.Errorf("PendingOrder(%d, uid %d): %d redis commands, want at most 1", c.oid, c.uid, n)
			}
		}
	})
}

// TestFindOrder: one round trip (two pipelined commands) tells whether
// Redis holds the activity, whether it issued an id (the last one issued
// is the meta's seq: the id just beyond it is no order until the next
// grab issues it), and whose the order is.
func TestFindOrder(t *testing.T) {
	forEachServer(t, stock.Config{}, func(t *testing.T, e *stock.Engine, cmds *rediscount.Counter) {
		ctx := context.Background()
		a := openActivity(1, 10)
		if h, err := e.FindOrder(ctx, a, seckill.OrderID(1, 8), 7); err != nil || h != (stock.Held{}) {
			t.Fatalf("an activity Redis does not hold: %+v %v, want nothing known", h, err)
		}
		load(t, e, a, nil)
		first := grab(t, e, a, 7).OrderID
		next := first + 1
		cases := []struct {
			name     string
			oid, uid int64
			want     stock.Held
		}{
			{"the owner", first, 7, stock.Held{Loaded: true, Issued: true, Owner: 7}},
			{"an admin", first, 0, stock.Held{Loaded: true, Issued: true, Owner: 7}},
			{"another user", first, 8, stock.Held{Loaded: true, Issued: true}},
			{"an id not issued yet, by a user", next, 8, stock.Held{Loaded: true}},
			{"an id not issued yet, by an admin", next, 0, stock.Held{Loaded: true}},
			{"an id issued before the first order", first - 1, 0, stock.Held{Loaded: true, Issued: true}},
			{"another activity's id", seckill.OrderID(2, seckill.OrderLocal(first)), 7, stock.Held{Loaded: true}},
		}
		check := func() {
			t.Helper()
			for _, c := range cases {
				before := cmds.N()
				h, err := e.FindOrder(ctx, a, c.oid, c.uid)
				if err != nil || h != c.want {
					t.Errorf("%s: got %+v %v, want %+v", c.name, h, err, c.want)
				}
				if n := cmds.N() - before; n > 2 {
					t.Errorf("%s: %d redis commands, want at most 2 (one round trip)", c.name, n)
				}
			}
		}
		check()
		// The next grab issues an id at or beyond next: now issued.
		second := grab(t, e, a, 8).OrderID
		if second < next {
			t.Fatalf("second order %d, want at least %d", second, next)
		}
		var owner int64 // of next: the second order, or no order (an id skipped)
		if second == next {
			owner = 8
		}
		cases = []struct {
			name     string
			oid, uid int64
			want     stock.Held
		}{
			{"the id just beyond the first, once the next grab issued it", next, 0, stock.Held{Loaded: true, Issued: true, Owner: owner}},
			{"the second order, by its owner", second, 8, stock.Held{Loaded: true, Issued: true, Owner: 8}},
		}
		check()
	})
}

// TestReconcile: confirmed orders Redis did not know take their units and
// marks once; a user who grabbed again keeps one unit; with no stock left
// the unit becomes a debt that the next refused order pays.
func TestReconcile(t *testing.T) {
	forEachServer(t, stock.Config{}, func(t *testing.T, e *stock.Engine, _ *rediscount.Counter) {
		ctx := context.Background()
		a := seckill.Activity{ID: 1}
		id := func(n int64) int64 { return seckill.OrderID(1, n) }
		if _, err := e.Reconcile(ctx, a, []seckill.Buyer{{UserID: 1, OrderID: id(101)}}); !errors.Is(err, stock.ErrNotLoaded) {
			t.Fatalf("reconcile of an unloaded activity: got %v, want ErrNotLoaded", err)
		}
		load(t, e, openActivity(1, 4), nil)
		remaining := func() int64 { n, _ := e.Remaining(ctx, a); return n }
		epoch := func() string { return e.Client().HGet(ctx, e.Keys(a)[0].Meta, "epoch").Val() }
		confirmed := []seckill.Buyer{{UserID: 1, OrderID: id(101)}, {UserID: 2, OrderID: id(102)}}
		epochs := []string{epoch()}
		for i := range 2 {
			if n, err := e.Reconcile(ctx, a, confirmed); err != nil || n != int64(2*(1-i)) {
				t.Fatalf("reconcile #%d: got %d %v", i+1, n, err)
			}
			epochs = append(epochs, epoch())
		}
		if epochs[0] == epochs[1] || epochs[1] != epochs[2] {
			t.Errorf("epochs %q: want a change when marks were added, none when nothing changed", epochs)
		}
		if got := remaining(); got != 2 {
			t.Fatalf("remaining after reconciling 2 orders: %d, want 2", got)
		}
		// User 3 grabbed again before the database's order 103 was
		// reconciled: one unit for the user, the mark moves to 103, and the
		// duplicate's compensation changes nothing.
		again := grab(t, e, a, 3).OrderID
		if n, err := e.Reconcile(ctx, a, []seckill.Buyer{{UserID: 3, OrderID: id(103)}}); err != nil || n != 0 {
			t.Fatalf("reconcile of a user who grabbed again: %d %v", n, err)
		}
		if done, _ := e.Compensate(ctx, a, 3, again, id(103)); done {
			t.Error("the duplicate's compensation acted although the mark moved")
		}
		if got := remaining(); got != 1 {
			t.Fatalf("remaining: %d, want 1", got)
		}
		// The last unit goes to user 9 in Redis while the database confirmed
		// user 8: a debt, paid by user 9's refusal.
		nine := grab(t, e, a, 9).OrderID
		if n, err := e.Reconcile(ctx, a, []seckill.Buyer{{UserID: 8, OrderID: id(108)}}); err != nil || n != 1 {
			t.Fatalf("reconcile without stock: %d %v", n, err)
		}
		if got := remaining(); got != 0 {
			t.Errorf("remaining went to %d, want 0", got)
		}
		if done, _ := e.Compensate(ctx, a, 9, nine, 0); !done {
			t.Fatal("the refused order was not compensated")
		}
		if got := remaining(); got != 0 {
			t.Errorf("remaining after paying the debt: %d, want 0", got)
		}
		if debt, _ := e.Client().Get(ctx, e.Keys(a)[0].Debt).Int64(); debt != 0 {
			t.Errorf("debt left: %d", debt)
		}
	})
}

// TestSnapshot: the buyers of a sold-out activity, read whole, small or
// large (chunked), and valid until a compensation or a reconciliation
// changes them.
func TestSnapshot(t *testing.T) {
	forEachServer(t, stock.Config{}, func(t *testing.T, e *stock.Engine, cmds *rediscount.Counter) {
		ctx := context.Background()
		a := seckill.Activity{ID: 1}
		if _, err := e.SoldOutSnapshot(ctx, a, 100); !errors.Is(err, stock.ErrNotLoaded) {
			t.Errorf("snapshot of an unloaded activity: %v, want ErrNotLoaded", err)
		}
		load(t, e, openActivity(1, 3), nil)
		if _, err := e.SoldOutSnapshot(ctx, a, 100); !errors.Is(err, stock.ErrNotSoldOut) {
			t.Errorf("snapshot with stock left: %v, want ErrNotSoldOut", err)
		}
		orders := map[int64]int64{}
		for uid := int64(1); uid <= 3; uid++ {
			orders[uid] = grab(t, e, a, uid).OrderID
		}
		if _, err := e.SoldOutSnapshot(ctx, a, 2); !errors.Is(err, stock.ErrTooManyBuyers) {
			t.Errorf("snapshot above the limit: %v, want ErrTooManyBuyers", err)
		}
		s, err := e.SoldOutSnapshot(ctx, a, 100)
		if err != nil || s.Len() != 3 {
			t.Fatalf("snapshot: %v, %v; want 3 buyers", s, err)
		}
		for uid := int64(1); uid <= 4; uid++ {
			if got, ok := s.Order(uid); got != orders[uid] || ok != (uid <= 3) {
				t.Errorf("snapshot order of user %d: %d %v, want %d", uid, got, ok, orders[uid])
			}
		}
		valid := func() bool {
			t.Helper()
			before := cmds.N()
			ok, err := e.SnapshotValid(ctx, s)
			if err != nil {
				t.Fatal(err)
			}
			if n := cmds.N() - before; n != 1 { // the meta's remaining stock and epoch
				t.Errorf("SnapshotValid took %d commands, want 1", n)
			}
			return ok
		}
		if _, err := e.Grab(ctx, a, 9); !errors.Is(err, stock.ErrSoldOut) || !valid() {
			t.Errorf("after a refused grab: %v, valid %v; want sold out and still valid", err, valid())
		}
		// A failed order of user 2 whose unit pays a debt: the stock stays
		// 0, the buyers change.
		if err := e.Client().Set(ctx, e.Keys(a)[0].Debt, 1, 0).Err(); err != nil {
			t.Fatal(err)
		}
		if done, err := e.Compensate(ctx, a, 2, orders[2], 0); err != nil || !done {
			t.Fatalf("compensate: %v %v", done, err)
		}
		if valid() {
			t.Error("snapshot still valid after the buyers changed")
		}
		s, err = e.SoldOutSnapshot(ctx, a, 100)
		if err != nil || s.Len() != 2 || !valid() {
			t.Fatalf("snapshot after the change: %v %v; want 2 buyers, valid", s, err)
		}
		if _, err := e.Reconcile(ctx, a, []seckill.Buyer{{UserID: 50, OrderID: seckill.OrderID(1, 7)}}); err != nil {
			t.Fatal(err)
		}
		if valid() {
			t.Error("snapshot still valid after a reconciliation added a buyer")
		}

		// Large: read in chunks.
		const n = 2500
		load(t, e, openActivity(2, n), nil)
		b := seckill.Activity{ID: 2}
		var wg sync.WaitGroup
		for uid := int64(1); uid <= n; uid++ {
			wg.Go(func() {
				if _, err := e.Grab(ctx, b, uid); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		s, err = e.SoldOutSnapshot(ctx, b, n)
		if err != nil || s.Len() != n {
			t.Fatalf("large snapshot: %v; want %d buyers", err, n)
		}
		for _, uid := range []int64{1, n / 2, n} {
			if _, ok := s.Order(uid); !ok {
				t.Errorf("large snapshot lacks user %d", uid)
			}
		}
	})
}

// TestCombinersEnd: after hundreds of activities were grabbed, their
// combiners' goroutines end once idle, and the next grab starts them again.
func TestCombinersEnd(t *testing.T) {
	e, _ := newEngineAt(t, testenv.RedisAddr(t), stock.Config{CombinerIdle: 20 * time.Millisecond})
	ctx := context.Background()
	const n = 300
	for id := int64(1); id <= n; id++ {
		load(t, e, openActivity(id, 10), nil)
	}
	before := runtime.NumGoroutine()
	var wg sync.WaitGroup
	for id := int64(1); id <= n; id++ {
		wg.Go(func() {
			if _, err := e.Grab(ctx, seckill.Activity{ID: id}, 1); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	testenv.WaitFor(t, "combiner goroutines back to the baseline", func() bool { return runtime.NumGoroutine() <= before+2 })
	if res := grab(t, e, seckill.Activity{ID: 7}, 2); !res.New {
		t.Errorf("grab after the combiner ended: %+v", res)
	}
	testenv.WaitFor(t, "the restarted combiner ends again", func() bool { return runtime.NumGoroutine() <= before+2 })
}

// TestCombinerRestartRace: with an idle time so short that combiners end
// between nearly every grab, every grab is still answered: none is left in
// the queue of a combiner whose goroutine ended.
func TestCombinerRestartRace(t *testing.T) {
	e, _ := newEngineAt(t, testenv.RedisAddr(t), stock.Config{CombinerIdle: time.Microsecond, Pipelines: 2})
	ctx := context.Background()
	load(t, e, openActivity(1, 100_000), nil)
	var wg sync.WaitGroup
	var answered atomic.Int64
	for w := range int64(8) {
		wg.Go(func() {
			for i := range int64(150) {
				if _, err := e.Grab(ctx, seckill.Activity{ID: 1}, w*1000+i+1); err != nil {
					t.Error(err)
					return
				}
				answered.Add(1)
				if i%10 == 0 {
					time.Sleep(time.Millisecond) // let the combiner go idle
				}
			}
		})
	}
	testenv.WaitFor(t, "every grab answered", func() bool { return answered.Load() == 8*150 })
	wg.Wait()
}

// ExampleEntryID: an order's stream entry follows from its id.
func ExampleEntryID() {
	starts := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	oid := seckill.OrderID(42, 1000<<seckill.OrderSeqBits|5) // 1 s after the start, sequence 5
	fmt.Println(oid, stock.EntryID(starts, oid))
	// Output: 23089744191301 1893456001000-5
}
