package stock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/internal/rediscount"
	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/stock"
)

// bucketed returns an open activity of stockN units in n buckets.
func bucketed(id, stockN int64, n int) seckill.Activity {
	a := openActivity(id, stockN)
	a.Buckets = n
	return a
}

// answer is one grab's outcome in a crowd.
type answer struct {
	uid         int64
	sent, done  time.Time
	res         stock.Result
	err         error
	soldOut, ok bool
}

// crowd sends one grab per uid, from workers goroutines at once, and
// returns the answers.
func crowd(t *testing.T, e *stock.Engine, a seckill.Activity, uids []int64, workers int) []answer {
	t.Helper()
	out := make([]answer, len(uids))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(len(uids)) {
					return
				}
				an := answer{uid: uids[i], sent: time.Now()}
				an.res, an.err = e.Grab(context.Background(), a, uids[i])
				an.done = time.Now()
				an.ok, an.soldOut = an.err == nil, errors.Is(an.err, stock.ErrSoldOut)
				out[i] = an
			}
		})
	}
	wg.Wait()
	for _, an := range out {
		if !an.ok && !an.soldOut {
			t.Fatalf("grab of user %d: %v", an.uid, an.err)
		}
	}
	return out
}

// checkSale checks a sold-out bucketed sale: exactly stockN new orders, to
// distinct users, each issued by its buyer's home bucket and written in
// that bucket's stream; every bucket empty; no unit in flight.
func checkSale(t *testing.T, e *stock.Engine, a seckill.Activity, answers []answer) {
	t.Helper()
	ctx := context.Background()
	n := a.BucketCount()
	buyers := map[int64]int64{}
	orders := map[int64]bool{}
	for _, an := range answers {
		if !an.ok {
			continue
		}
		if prev, ok := buyers[an.uid]; ok && prev != an.res.OrderID {
			t.Fatalf("user %d has two orders: %d and %d", an.uid, prev, an.res.OrderID)
		}
		buyers[an.uid] = an.res.OrderID
		if an.res.New {
			if orders[an.res.OrderID] {
				t.Fatalf("order %d issued twice", an.res.OrderID)
			}
			orders[an.res.OrderID] = true
		}
		if b, home := stock.Bucket(an.res.OrderID, n), stock.Home(an.uid, n); b != home {
			t.Fatalf("order %d of user %d is of bucket %d, the user's home is %d", an.res.OrderID, an.uid, b, home)
		}
	}
	if int64(len(orders)) != a.Stock || int64(len(buyers)) != a.Stock {
		t.Fatalf("%d orders to %d buyers, want exactly the stock, %d", len(orders), len(buyers), a.Stock)
	}
	left, err := e.RemainingByBucket(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	for b, l := range left {
		if l != 0 {
			t.Errorf("bucket %d holds %d units after the sell-out", b, l)
		}
	}
	var entries int64
	for b, k := range e.Keys(a) {
		msgs, err := e.Client().XRange(ctx, k.Orders, "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			req, err := stock.ParseEntry(a.ID, m)
			if err != nil {
				t.Fatal(err)
			}
			if buyers[req.UserID] != req.OrderID || stock.Bucket(req.OrderID, n) != b {
				t.Fatalf("stream of bucket %d: entry %s (order %d of user %d) answers no grab of that bucket", b, m.ID, req.OrderID, req.UserID)
			}
		}
		entries += int64(len(msgs))
		if j, _ := e.Client().HLen(ctx, k.Journal).Result(); j != 0 {
			t.Errorf("bucket %d: %d transfers left in its journal", b, j)
		}
	}
	if entries != a.Stock {
		t.Errorf("%d stream entries, want %d", entries, a.Stock)
	}
}

// TestBucketsSeeds: the seeds' cases with 16 buckets: 200 buyers for 10
// units buy exactly 10; one user clicking 50 times gets one order.
func TestBucketsSeeds(t *testing.T) {
	forEachServer(t, stock.Config{}, func(t *testing.T, e *stock.Engine, _ *rediscount.Counter) {
		a := bucketed(1, 10, 16)
		load(t, e, a, nil)
		uids := make([]int64, 200)
		for i := range uids {
			uids[i] = int64(i + 1)
		}
		answers := crowd(t, e, a, uids, 200)
		checkSale(t, e, a, answers)

		b := bucketed(2, 5, 16)
		load(t, e, b, nil)
		clicks := make([]int64, 50)
		for i := range clicks {
			clicks[i] = 7
		}
		var order int64
		news := 0
		for _, an := range crowd(t, e, b, clicks, 50) {
			if !an.ok || order != 0 && an.res.OrderID != order {
				t.Fatalf("click of user 7: %+v %v, want the one order %d", an.res, an.err, order)
			}
			order = an.res.OrderID
			if an.res.New {
				news++
			}
		}
		if news != 1 {
			t.Fatalf("50 clicks made %d new orders, want 1", news)
		}
		if left, _ := e.Remaining(context.Background(), b); left != 4 {
			t.Errorf("after one user's 50 clicks, %d of 5 units left, want 4", left)
		}
	})
}

// falseSoldOut counts the sold-out answers that a later grab proved
// false: one sent after the sold-out answer came back got an order.
func falseSoldOut(answers []answer) (soldOut, wrong int) {
	var lastNewSent time.Time
	for _, an := range answers {
		if an.ok && an.res.New && an.sent.After(lastNewSent) {
			lastNewSent = an.sent
		}
	}
	for _, an := range answers {
		if an.soldOut {
			soldOut++
			if an.done.Before(lastNewSent) {
				wrong++
			}
		}
	}
	return soldOut, wrong
}

// skewedUsers returns users of whom 90% are homed in two of n buckets,
// shuffled.
func skewedUsers(total, n int) []int64 {
	var hot, cold []int64
	for uid := int64(1); len(hot) < total*9/10 || len(cold) < total-total*9/10; uid++ {
		switch h := stock.Home(uid, n); {
		case h < 2 && len(hot) < total*9/10:
			hot = append(hot, uid)
		case h >= 2 && len(cold) < total-total*9/10:
			cold = append(cold, uid)
		}
	}
	uids := append(hot, cold...)
	rand.Shuffle(len(uids), func(i, j int) { uids[i], uids[j] = uids[j], uids[i] })
	return uids
}

// TestBucketsSkewed: a crowd three times the stock, 90% of it homed in two
// of 16 buckets: the hot buckets borrow from the others, everything sells,
// and at most 0.1% of the sold-out answers came while units were left.
func TestBucketsSkewed(t *testing.T) {
	forEachServer(t, stock.Config{}, func(t *testing.T, e *stock.Engine, _ *rediscount.Counter) {
		a := bucketed(1, 1000, 16)
		load(t, e, a, nil)
		answers := crowd(t, e, a, skewedUsers(3000, 16), 64)
		checkSale(t, e, a, answers)
		checkSoldOut(t, e, answers)
	})
}

// checkSoldOut checks that at most 0.1% of the sold-out answers were
// proved wrong by a later grab.
func checkSoldOut(t *testing.T, e *stock.Engine, answers []answer) {
	t.Helper()
	soldOut, wrong := falseSoldOut(answers)
	t.Logf("%d sold-out answers, %d of them before a later grab got a unit; borrowing: %+v", soldOut, wrong, e.BorrowStats())
	if wrong*1000 > soldOut {
		t.Errorf("%d of %d sold-out answers came while the sale still had units, want at most 0.1%%", wrong, soldOut)
	}
}

// TestBucketsPartialLoss: a bucket that Redis lost (a Cluster master
// restarted empty) is loaded again with what the others do not account
// for, never more (their units, their orders not yet written, their
// transfers in flight stay where they are), and with transfer counters
// that make Q whole again, so that the sale is still proved sold out.
func TestBucketsPartialLoss(t *testing.T) {
	ctx := context.Background()
	e := newEngine(t)
	a := bucketed(1, 100, 4)
	load(t, e, a, nil)
	// 60 users of bucket 0 buy its 25 units and borrow 35 from the others.
	var homed []int64
	for uid := int64(1); len(homed) < 60; uid++ {
		if stock.Home(uid, 4) == 0 {
			homed = append(homed, uid)
		}
	}
	crowd(t, e, a, homed, 8)
	held, err := e.RemainingByBucket(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	// Bucket 0 goes, with its 60 orders (not written: the database still
	// has 100 units; their buyers were told yes, which is what AckReplicas
	// prevents) and the counters of the 35 units it received.
	lost := e.Keys(a)[0]
	if err := e.Client().Del(ctx, lost.Meta, lost.Buyers, lost.Orders, lost.Credits, lost.Journal).Err(); err != nil {
		t.Fatal(err)
	}
	if ok, _ := e.Loaded(ctx, a); ok {
		t.Fatal("loaded with a bucket gone")
	}
	if ok, err := e.Load(ctx, a, nil); err != nil || !ok {
		t.Fatalf("reload: %v %v", ok, err)
	}
	after, err := e.RemainingByBucket(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if after[1] != held[1] || after[2] != held[2] || after[3] != held[3] || after[0] != 100-held[1]-held[2]-held[3] {
		t.Errorf("by bucket: %v before the loss, %v after the reload; want the held ones kept and the lost one given the rest of 100", held, after)
	}
	// The 100 units sell to a new crowd of every bucket, and the sell-out
	// is proved.
	uids := make([]int64, 300)
	for i := range uids {
		uids[i] = int64(1000 + i)
	}
	checkSale(t, e, a, crowd(t, e, a, uids, 16))
	if b := e.BorrowStats(); b.Unproven != 0 || b.Proven == 0 {
		t.Errorf("borrowing after the reload: %+v, want every sold-out proved", b)
	}
	if _, err := e.SoldOutSnapshot(ctx, a, 1000); err != nil {
		t.Errorf("buyer snapshot of the sold-out sale: %v", err)
	}
}

// TestBucketsCluster: on a 3-master Cluster, an activity of 16 buckets
// spreads a crowd's grabs over every master (each runs at least 25% of the
// scripts) and sells exactly its stock; a skewed crowd, 90% of it homed
// in two buckets, too.
func TestBucketsCluster(t *testing.T) {
	nodes := testenv.StartCluster(t, 3)
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.Addr
	}
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	e := engineOn(t, rdb, stock.Config{})
	ctx := context.Background()
	if err := e.Preload(ctx); err != nil {
		t.Fatal(err)
	}
	a := bucketed(1, 2000, 16)
	load(t, e, a, nil)
	for _, n := range nodes {
		c := redis.NewClient(&redis.Options{Addr: n.Addr})
		if err := c.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	uids := make([]int64, 6000)
	for i := range uids {
		uids[i] = int64(i + 1)
	}
	checkSale(t, e, a, crowd(t, e, a, uids, 64))
	nodeCalls, err := stock.ScriptCalls(ctx, rdb)
	if err != nil || len(nodeCalls) != 3 {
		t.Fatalf("script calls of %d masters, want 3: %v", len(nodeCalls), err)
	}
	var calls []int64
	var total int64
	for _, n := range nodeCalls {
		calls = append(calls, n.Calls)
		total += n.Calls
	}
	t.Logf("script calls per master: %v", calls)
	for i, c := range calls {
		if c*4 < total {
			t.Errorf("master %d ran %d of %d script calls, want at least 25%%", i, c, total)
		}
	}

	skewed := bucketed(2, 2000, 16)
	load(t, e, skewed, nil)
	answers := crowd(t, e, skewed, skewedUsers(6000, 16), 64)
	checkSale(t, e, skewed, answers)
	checkSoldOut(t, e, answers)
}

// TestBucketsReturnRetire: a returned unit goes back to its buyer's home
// bucket, once; the buyer may buy again there; retiring the ended sale
// deletes every key of every bucket, and the layout marker.
func TestBucketsReturnRetire(t *testing.T) {
	forEachServer(t, stock.Config{}, func(t *testing.T, e *stock.Engine, _ *rediscount.Counter) {
		ctx := context.Background()
		a := bucketed(1, 4, 4)
		load(t, e, a, nil)
		if ok, err := e.Present(ctx, a.ID); err != nil || !ok {
			t.Fatalf("Present after the load: %v %v", ok, err)
		}
		uids := []int64{1, 2, 3, 4, 5, 6}
		orders := map[int64]int64{}
		for _, an := range crowd(t, e, a, uids, 1) {
			if an.ok {
				orders[an.uid] = an.res.OrderID
			}
		}
		if len(orders) != 4 {
			t.Fatalf("%d orders of 4 units", len(orders))
		}
		var uid int64
		for u := range orders {
			uid = u
			break
		}
		r := seckill.Return{OrderID: orders[uid], ActivityID: a.ID, UserID: uid, Status: seckill.OrderCancelled, Rebuy: true, Buckets: 4}
		checkReturn(t, e, r, stock.Returned)
		checkReturn(t, e, r, stock.AlreadyReturned)
		left, err := e.RemainingByBucket(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		want := []int64{0, 0, 0, 0}
		want[stock.Home(uid, 4)] = 1
		if fmt.Sprint(left) != fmt.Sprint(want) {
			t.Fatalf("after the return: %v by bucket, want %v (the unit in user %d's home)", left, want, uid)
		}
		if again := grab(t, e, a, uid); !again.New || again.OrderID == orders[uid] {
			t.Fatalf("the buyer's grab after the return: %+v, want a new order", again)
		}

		// Ended an hour ago, retained a minute: every key goes.
		ended := a
		ended.EndsAt = time.Now().Add(-time.Hour)
		st, err := e.Stats(ctx, ended)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := e.Retire(ctx, ended, time.Minute); err != nil || ok {
			t.Fatalf("Retire with %d orders not written: %v %v, want refused", st.Backlog(), ok, err)
		}
		for _, k := range e.Keys(a) {
			if err := e.Client().Del(ctx, k.Orders).Err(); err != nil { // as if written and trimmed
				t.Fatal(err)
			}
		}
		if ok, err := e.Retire(ctx, ended, time.Minute); err != nil || !ok {
			t.Fatalf("Retire: %v %v", ok, err)
		}
		keys, err := e.Client().Keys(ctx, e.Prefix()+":*").Result()
		if err != nil || len(keys) != 0 {
			t.Fatalf("after Retire: keys %v (%v), want none", keys, err)
		}
		if ok, _ := e.Present(ctx, a.ID); ok {
			t.Error("Present after Retire")
		}
	})
}
