// Package storetest is the conformance suite of seckill.Store: every SQL
// engine runs it from its own tests, so that all engines behave alike.
package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckilldev/seckill"
)

// Open returns a Store on a fresh, empty database that is closed (and
// dropped) when t ends.
type Open func(t testing.TB) seckill.Store

// Run runs the conformance suite, each test on its own database.
func Run(t *testing.T, open Open) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s seckill.Store)
	}{
		{"CreateActivity", testCreateActivity},
		{"Activities", testActivities},
		{"ApplyOrdersStock", testApplyOrdersStock},
		{"ApplyOrdersRedelivery", testApplyOrdersRedelivery},
		{"ApplyOrdersDuplicateUser", testApplyOrdersDuplicateUser},
		{"ApplyOrdersSameOrderTwice", testApplyOrdersSameOrderTwice},
		{"ApplyOrdersSeveralActivities", testApplyOrdersSeveralActivities},
		{"ApplyOrdersUnknownActivity", testApplyOrdersUnknownActivity},
		{"ApplyOrdersLargeBatch", testApplyOrdersLargeBatch},
		{"ApplyOrdersEmpty", testApplyOrdersEmpty},
		{"ApplyOrdersConcurrent", testApplyOrdersConcurrent},
		{"ApplyOrdersRacingFailOrders", testApplyOrdersRacingFailOrders},
		{"ApplyOrdersConcurrentNew", testApplyOrdersConcurrentNew},
		{"FailOrders", testFailOrders},
		{"GrabAgainAfterFailure", testGrabAgainAfterFailure},
		{"Order", testOrder},
		{"LastOrderID", testLastOrderID},
		{"PayBy", testPayBy},
		{"Pay", testPay},
		{"PayRefusals", testPayRefusals},
		{"Cancel", testCancel},
		{"CancelRefusals", testCancelRefusals},
		{"Expire", testExpire},
		{"ExpireFence", testExpireFence},
		{"PayRacingExpire", testPayRacingExpire},
		{"DoubleClickPay", testDoubleClickPay},
		{"DoubleClickCancel", testDoubleClickCancel},
		{"Rebuy", testRebuy},
		{"Load", testLoad},
		{"NextDeadline", testNextDeadline},
		{"PendingReturns", testPendingReturns},
		{"UserOrders", testUserOrders},
		{"StateCounts", testStateCounts},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.fn(t, open(t))
		})
	}
}

// RunOpen checks that opening the same database again, or from several
// goroutines at once (as processes starting together do), applies the
// migrations exactly once and keeps the data. open must open the same fresh
// database on every call.
func RunOpen(t *testing.T, open func(ctx context.Context) (seckill.Store, error)) {
	ctx := context.Background()
	const n = 4
	stores := make([]seckill.Store, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { stores[i], errs[i] = open(ctx) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("concurrent open %d: %v", i, err)
		}
	}
	a := newActivity(t, stores[0], 2)
	for i, s := range stores {
		if err := s.Ping(ctx); err != nil {
			t.Errorf("store %d: Ping: %v", i, err)
		}
		if _, err := s.Activity(ctx, a.ID); err != nil {
			t.Errorf("store %d: Activity: %v", i, err)
		}
		if err := s.Close(); err != nil {
			t.Errorf("store %d: Close: %v", i, err)
		}
	}

	for i := range 2 {
		s, err := open(ctx)
		if err != nil {
			t.Fatalf("open again (%d): %v", i, err)
		}
		got, err := s.Activity(ctx, a.ID)
		if err != nil || got != a {
			t.Errorf("after reopening: Activity = %+v, %v; want %+v", got, err, a)
		}
		checkApply(t, s, []seckill.OrderRequest{req(int64(100+i), a.ID, int64(i))}, confirmed)
		a.Remaining--
		s.Close()
	}
}

// Benchmark measures ApplyOrders on batches of 200 requests: new orders (the
// worker's steady state) and redelivered ones (after a crash).
func Benchmark(b *testing.B, open Open) {
	const size = 200
	b.Run("new", func(b *testing.B) {
		s := open(b)
		a := newActivity(b, s, seckill.MaxStock)
		next := int64(0)
		for b.Loop() {
			batch := make([]seckill.OrderRequest, size)
			for i := range batch {
				next++
				batch[i] = req(next, a.ID, next)
			}
			if _, err := s.ApplyOrders(context.Background(), batch); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*size), "ns/order")
	})
	b.Run("redelivered", func(b *testing.B) {
		s := open(b)
		a := newActivity(b, s, seckill.MaxStock)
		batch := make([]seckill.OrderRequest, size)
		for i := range batch {
			batch[i] = req(int64(i), a.ID, int64(i))
		}
		if _, err := s.ApplyOrders(context.Background(), batch); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := s.ApplyOrders(context.Background(), batch); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*size), "ns/order")
	})
}

func testCreateActivity(t *testing.T, s seckill.Store) {
	ctx := context.Background()
	shanghai := time.FixedZone("UTC+8", 8*3600)
	starts := time.Date(2030, 1, 2, 20, 4, 5, 123_456_789, shanghai) // sub-millisecond part is dropped
	a := seckill.Activity{Name: "秒杀 iPhone ✓", Stock: seckill.MaxStock, StartsAt: starts, EndsAt: starts.Add(90 * time.Minute)}
	if err := s.CreateActivity(ctx, &a); err != nil {
		t.Fatalf("CreateActivity: %v", err)
	}
	want := seckill.Activity{
		ID: a.ID, Name: "秒杀 iPhone ✓", Stock: seckill.MaxStock, Remaining: seckill.MaxStock,
		StartsAt: time.Date(2030, 1, 2, 12, 4, 5, 123_000_000, time.UTC),
		EndsAt:   time.Date(2030, 1, 2, 13, 34, 5, 123_000_000, time.UTC),
		Buckets:  1, // 0 means 1, and is stored as such
	}
	if a.ID <= 0 {
		t.Errorf("ID = %d, want > 0", a.ID)
	}
	checkActivity(t, "CreateActivity set", a, want)
	got, err := s.Activity(ctx, a.ID)
	if err != nil {
		t.Fatalf("Activity: %v", err)
	}
	checkActivity(t, "Activity", got, want)

	b := seckill.Activity{Name: strings.Repeat("x", 200), Stock: 1, StartsAt: starts, EndsAt: starts.Add(time.Millisecond)}
	if err := s.CreateActivity(ctx, &b); err != nil {
		t.Fatalf("CreateActivity(b): %v", err)
	}
	if b.ID == a.ID {
		t.Errorf("second activity got the same id %d", b.ID)
	}
	c := seckill.Activity{Name: "c", Stock: 5, StartsAt: starts, EndsAt: starts.Add(time.Hour), Buckets: seckill.MaxBuckets}
	if err := s.CreateActivity(ctx, &c); err != nil {
		t.Fatalf("CreateActivity(c): %v", err)
	}
	if got, err := s.Activity(ctx, c.ID); err != nil || got.Buckets != seckill.MaxBuckets {
		t.Errorf("Activity(c) = %+v, %v; want %d buckets", got, err, seckill.MaxBuckets)
	}
	c.Buckets = seckill.MaxBuckets + 1
	if err := s.CreateActivity(ctx, &c); seckill.ErrorCode(err) != seckill.EINVALID {
		t.Errorf("CreateActivity with %d buckets: %v, want %s", c.Buckets, err, seckill.EINVALID)
	}
	// A waiting room's rate and hold read back as created (a, without
	// one, read back 0 and 0).
	d := seckill.Activity{Name: "d", Stock: 5, StartsAt: starts, EndsAt: starts.Add(time.Hour),
		QueueRate: seckill.MaxQueueRate, QueueHold: seckill.MaxQueueHold}
	if err := s.CreateActivity(ctx, &d); err != nil {
		t.Fatalf("CreateActivity(d): %v", err)
	}
	if got, err := s.Activity(ctx, d.ID); err != nil {
		t.Errorf("Activity(d): %v", err)
	} else {
		checkActivity(t, "Activity(d)", got, d)
	}
	d.QueueRate = seckill.MaxQueueRate + 1
	if err := s.CreateActivity(ctx, &d); seckill.ErrorCode(err) != seckill.EINVALID {
		t.Errorf("CreateActivity with queue rate %d: %v, want %s", d.QueueRate, err, seckill.EINVALID)
	}
	if got, err := s.Activity(ctx, b.ID); err != nil || got.Name != b.Name || !got.EndsAt.Equal(b.EndsAt) {
		t.Errorf("Activity(b) = %+v, %v; want %+v", got, err, b)
	}

	bad := seckill.Activity{Name: "no stock", StartsAt: starts, EndsAt: starts.Add(time.Hour)}
	if err := s.CreateActivity(ctx, &bad); seckill.ErrorCode(err) != seckill.EINVALID {
		t.Errorf("CreateActivity(stock 0) = %v, want %s", err, seckill.EINVALID)
	}
	if _, err := s.Activity(ctx, a.ID+b.ID+1000); seckill.ErrorCode(err) != seckill.ENOTFOUND {
		t.Errorf("Activity(unknown) = %v, want %s", err, seckill.ENOTFOUND)
	}
}

func testActivities(t *testing.T, s seckill.Store) {
	ctx := context.Background()
	base := time.Date(2031, 6, 1, 0, 0, 0, 0, time.UTC)
	create := func(name string, ends time.Duration) seckill.Activity {
		a := seckill.Activity{Name: name, Stock: 5, StartsAt: base, EndsAt: base.Add(ends)}
		if err := s.CreateActivity(ctx, &a); err != nil {
			t.Fatalf("CreateActivity(%s): %v", name, err)
		}
		return a
	}
	a := create("a", 3*time.Hour)
	b := create("b", time.Hour)
	c := create("c", 2*time.Hour+time.Millisecond)

	for _, tt := range []struct {
		since time.Time
		want  []seckill.Activity
	}{
		{base, []seckill.Activity{a, b, c}},
		{base.Add(time.Hour), []seckill.Activity{a, b, c}}, // ends_at >= since
		{base.Add(time.Hour + time.Millisecond), []seckill.Activity{a, c}},
		{base.Add(2*time.Hour + time.Millisecond).In(time.FixedZone("UTC-5", -5*3600)), []seckill.Activity{a, c}},
		{base.Add(2*time.Hour + time.Millisecond + time.Nanosecond), []seckill.Activity{a}},
		{base.Add(2*time.Hour + 2*time.Millisecond), []seckill.Activity{a}},
		{base.Add(4 * time.Hour), nil},
	} {
		got, err := s.Activities(ctx, tt.since)
		if err != nil {
			t.Fatalf("Activities(%v): %v", tt.since, err)
		}
		if len(got) != len(tt.want) {
			t.Errorf("Activities(%v) = %d activities %v, want %d", tt.since, len(got), names(got), len(tt.want))
			continue
		}
		for i := range got {
			checkActivity(t, fmt.Sprintf("Activities(%v)[%d]", tt.since, i), got[i], tt.want[i])
		}
	}
}

func testApplyOrdersStock(t *testing.T, s seckill.Store) {
	a := newActivity(t, s, 3)
	checkApply(t, s, []seckill.OrderRequest{
		req(1, a.ID, 1), req(2, a.ID, 2), req(3, a.ID, 3), req(4, a.ID, 4), req(5, a.ID, 5),
	}, confirmed, confirmed, confirmed, soldOut, soldOut)
	checkRemaining(t, s, a.ID, 0)
	checkApply(t, s, []seckill.OrderRequest{req(6, a.ID, 6), req(7, a.ID, 7)}, soldOut, soldOut)
	checkRemaining(t, s, a.ID, 0)
	checkBuyers(t, s, a.ID, []seckill.Buyer{{UserID: 1, OrderID: 1}, {UserID: 2, OrderID: 2}, {UserID: 3, OrderID: 3}})
	checkOrder(t, s, 4, seckill.OrderFailed, seckill.ReasonSoldOut)
}

func testApplyOrdersRedelivery(t *testing.T, s seckill.Store) {
	a := newActivity(t, s, 2)
	batch := []seckill.OrderRequest{
		req(1, a.ID, 1), req(2, a.ID, 1), req(3, a.ID, 2), req(4, a.ID, 3), req(3, a.ID, 2),
	}
	want := []seckill.Outcome{confirmed, duplicate(1), confirmed, soldOut, confirmed}
	checkApply(t, s, batch, want...)
	for range 2 {
		checkApply(t, s, batch, want...)
		checkRemaining(t, s, a.ID, 0)
		checkBuyers(t, s, a.ID, []seckill.Buyer{{UserID: 1, OrderID: 1}, {UserID: 2, OrderID: 3}})
	}
	// Redelivered in another order and mixed with a new request.
	slices.Reverse(batch)
	checkApply(t, s, append(batch, req(5, a.ID, 4)), confirmed, soldOut, confirmed, duplicate(1), confirmed, soldOut)
}

func testApplyOrdersDuplicateUser(t *testing.T, s seckill.Store) {
	a := newActivity(t, s, 10)
	b := newActivity(t, s, 10)
	const user = 1 << 50
	checkApply(t, s, []seckill.OrderRequest{req(1, a.ID, user)}, confirmed)
	checkApply(t, s, []seckill.OrderRequest{req(2, a.ID, user)}, duplicate(1))
	checkApply(t, s, []seckill.OrderRequest{req(2, a.ID, user)}, duplicate(1)) // redelivered
	checkOrder(t, s, 2, seckill.OrderFailed, seckill.ReasonDuplicate)
	// Inside one batch, and in another activity (which is no duplicate).
	checkApply(t, s, []seckill.OrderRequest{
		req(3, a.ID, user+1), req(4, a.ID, user+1), req(5, b.ID, user), req(6, a.ID, user),
	}, confirmed, duplicate(3), confirmed, duplicate(1))
	checkRemaining(t, s, a.ID, 8)
	checkRemaining(t, s, b.ID, 9)
}

func testApplyOrdersSameOrderTwice(t *testing.T, s seckill.Store) {
	a := newActivity(t, s, 1)
	checkApply(t, s, []seckill.OrderRequest{
		req(1, a.ID, 1), req(1, a.ID, 1), req(2, a.ID, 2), req(2, a.ID, 2), req(1, a.ID, 1),
	}, confirmed, confirmed, soldOut, soldOut, confirmed)
	checkRemaining(t, s, a.ID, 0)
	checkBuyers(t, s, a.ID, []seckill.Buyer{{UserID: 1, OrderID: 1}})
}

func testApplyOrdersSeveralActivities(t *testing.T, s seckill.Store) {
	a := newActivity(t, s, 2)
	b := newActivity(t, s, 1)
	checkApply(t, s, []seckill.OrderRequest{
		req(1, b.ID, 1), req(2, a.ID, 1), req(3, a.ID, 2), req(4, b.ID, 2), req(5, a.ID, 3), req(6, b.ID, 1),
	}, confirmed, confirmed, confirmed, soldOut, soldOut, duplicate(1))
	checkRemaining(t, s, a.ID, 0)
	checkRemaining(t, s, b.ID, 0)
	checkBuyers(t, s, a.ID, []seckill.Buyer{{UserID: 1, OrderID: 2}, {UserID: 2, OrderID: 3}})
	checkBuyers(t, s, b.ID, []seckill.Buyer{{UserID: 1, OrderID: 1}})
}

// A request for an activity that does not exist fails as sold out: the
// database has no stock for it, and the batch around it goes through.
func testApplyOrdersUnknownActivity(t *testing.T, s seckill.Store) {
	a := newActivity(t, s, 1)
	unknown := a.ID + 1000
	checkApply(t, s, []seckill.OrderRequest{req(1, unknown, 1), req(2, a.ID, 1)}, soldOut, confirmed)
	checkApply(t, s, []seckill.OrderRequest{req(1, unknown, 1)}, soldOut)
	checkOrder(t, s, 1, seckill.OrderFailed, seckill.ReasonSoldOut)
}

// A batch larger than an engine's statement chunks keeps the semantics of
// one batch: a user seen early in the batch is a duplicate late in it.
func testApplyOrdersLargeBatch(t *testing.T, s seckill.Store) { RunLargeBatch(t, s, 1300, 1200) }

// RunLargeBatch runs the large batch test with n requests and the given
// stock, for an engine whose statement chunks are larger than the suite's
// batch. One request in 97 is by the buyer of the request 600 before it,
// who must have been confirmed: the stock must last past n-600.
func RunLargeBatch(t *testing.T, s seckill.Store, n, stock int64) {
	const back = 600
	a := newActivity(t, s, stock)
	var batch []seckill.OrderRequest
	var want []seckill.Outcome
	left := stock
	for i := range n {
		if i >= back+79 && i%97 == 0 { // the user of request i-back, confirmed in an earlier chunk
			batch = append(batch, req(i, a.ID, i-back))
			want = append(want, duplicate(i-back))
			continue
		}
		batch = append(batch, req(i, a.ID, i))
		if left > 0 {
			want = append(want, confirmed)
			left--
		} else {
			want = append(want, soldOut)
		}
	}
	checkApply(t, s, batch, want...)
	checkRemaining(t, s, a.ID, 0)
	checkApply(t, s, batch, want...)
}

func testApplyOrdersEmpty(t *testing.T, s seckill.Store) {
	ctx := context.Background()
	if got, err := s.ApplyOrders(ctx, nil); err != nil || len(got) != 0 {
		t.Errorf("ApplyOrders(nil) = %v, %v; want no outcomes", got, err)
	}
	if got, err := s.FailOrders(ctx, nil, seckill.ReasonPoison); err != nil || len(got) != 0 {
		t.Errorf("FailOrders(nil) = %v, %v; want no outcomes", got, err)
	}
}

// testApplyOrdersConcurrent runs overlapping batches from 8 goroutines, as
// workers do when a redelivered message is claimed by another consumer, with
// FailOrders racing on some of the same orders. Every call must report the
// same outcome for an order, the one the database keeps, and the stock must
// be sold exactly once to distinct users.
func testApplyOrdersConcurrent(t *testing.T, s seckill.Store) {
	ctx := context.Background()
	a := newActivity(t, s, 10)
	b := newActivity(t, s, 3)
	unknown := a.ID + b.ID + 1000 // no such activity: sold out, recorded under no lock
	var all []seckill.OrderRequest
	for u := range int64(40) {
		if u%5 == 0 {
			all = append(all, req(4000+u, unknown, u))
		}
		all = append(all, req(1000+u, a.ID, u))
		if u%4 == 0 {
			all = append(all, req(2000+u, a.ID, u)) // the same user again
		}
		if u%3 == 0 {
			all = append(all, req(3000+u, b.ID, u))
		}
	}

	// Large batches that take no activity lock at all: only the keys of
	// order_failures keep these transactions apart.
	var lockless []seckill.OrderRequest
	for i := range int64(1500) {
		lockless = append(lockless, req(10_000+i, unknown, 10_000+i))
	}

	var (
		mu       sync.Mutex
		reported = make(map[int64][]seckill.Outcome)
	)
	record := func(batch []seckill.OrderRequest, outs []seckill.Outcome) {
		mu.Lock()
		defer mu.Unlock()
		for i, r := range batch {
			reported[r.OrderID] = append(reported[r.OrderID], outs[i])
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 42))
			for round := range 3 {
				start := (g*11 + round*5) % len(all)
				batch := slices.Concat(all[start:], all[:start])[:len(all)/2]
				rng.Shuffle(len(batch), func(i, j int) { batch[i], batch[j] = batch[j], batch[i] })
				outs, err := s.ApplyOrders(ctx, batch)
				if err != nil {
					errs <- fmt.Errorf("goroutine %d: ApplyOrders: %w", g, err)
					return
				}
				record(batch, outs)
			}
		})
	}
	for g := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			batch := slices.Clone(lockless)
			rng.Shuffle(len(batch), func(i, j int) { batch[i], batch[j] = batch[j], batch[i] })
			outs, err := s.ApplyOrders(ctx, batch)
			if err != nil {
				errs <- fmt.Errorf("lockless goroutine %d: ApplyOrders: %w", g, err)
				return
			}
			record(batch, outs)
		})
	}
	wg.Go(func() {
		for i := range 3 {
			batch := []seckill.OrderRequest{all[i*7], all[i*7+3], all[len(all)-1-i]}
			outs, err := s.FailOrders(ctx, batch, seckill.ReasonPoison)
			if err != nil {
				errs <- fmt.Errorf("FailOrders: %w", err)
				return
			}
			record(batch, outs)
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	// Everything once more, so that all stock is taken whatever the windows.
	all = append(all, lockless...)
	outs, err := s.ApplyOrders(ctx, all)
	if err != nil {
		t.Fatalf("ApplyOrders(all): %v", err)
	}
	record(all, outs)

	confirmedIn := make(map[int64]int)
	for _, r := range all {
		o, err := s.Order(ctx, r.OrderID)
		if err != nil {
			t.Fatalf("Order(%d): %v", r.OrderID, err)
		}
		for _, got := range reported[r.OrderID] {
			if got != reported[r.OrderID][0] || got.Status != o.Status || got.Reason != o.Reason {
				t.Errorf("order %d: a call reported %+v, the database holds %s %q", r.OrderID, got, o.Status, o.Reason)
			}
		}
		if o.Status == seckill.OrderConfirmed {
			confirmedIn[r.ActivityID]++
		}
	}
	if confirmedIn[a.ID] != 10 || confirmedIn[b.ID] != 3 {
		t.Errorf("confirmed orders: %d in a, %d in b; want 10 and 3", confirmedIn[a.ID], confirmedIn[b.ID])
	}
	for _, act := range []seckill.Activity{a, b} {
		checkRemaining(t, s, act.ID, 0)
		buyers, err := s.Buyers(ctx, act.ID)
		if err != nil {
			t.Fatal(err)
		}
		users := make(map[int64]bool)
		for _, by := range buyers {
			if users[by.UserID] {
				t.Errorf("activity %d: user %d holds two orders", act.ID, by.UserID)
			}
			users[by.UserID] = true
		}
		if int64(len(buyers)) != act.Stock {
			t.Errorf("activity %d: %d buyers, want %d", act.ID, len(buyers), act.Stock)
		}
	}
}

// testApplyOrdersConcurrentNew writes batches of new orders of one activity
// from 6 goroutines at once, as a worker with a backlog does: most batches
// can confirm all they hold, some meet the same orders or the same buyers
// (under other orders) in another batch, and the last ones find the stock
// gone. Every call must report for an order the outcome the database keeps,
// and the stock must go to distinct buyers, exactly once.
func testApplyOrdersConcurrentNew(t *testing.T, s seckill.Store) {
	ctx := context.Background()
	const stock, users, size = 900, 1000, 40
	a := newActivity(t, s, stock)
	var all []seckill.OrderRequest
	for u := range int64(users) {
		all = append(all, req(u+1, a.ID, u))
		if u%30 == 0 {
			all = append(all, req(100_000+u, a.ID, u)) // the same buyer under another order
		}
	}
	batches := slices.Collect(slices.Chunk(all, size))
	outcomes := make([][]seckill.Outcome, len(batches))
	again := make([][]seckill.Outcome, len(batches))
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for g := range 6 {
		wg.Go(func() {
			for i := g; i < len(batches); i += 6 {
				out, err := s.ApplyOrders(ctx, batches[i])
				if err == nil && i%5 == 0 {
					// Redelivered: the same outcomes again.
					again[i], err = s.ApplyOrders(ctx, batches[i])
				}
				if err != nil {
					errs <- err
					return
				}
				outcomes[i] = out
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("ApplyOrders: %v", err)
	}
	// Everything again, now that the stock is gone.
	last, err := s.ApplyOrders(ctx, all)
	if err != nil {
		t.Fatalf("ApplyOrders(all): %v", err)
	}
	buyers := make(map[int64]int64)
	for i, batch := range batches {
		for j, r := range batch {
			o, err := s.Order(ctx, r.OrderID)
			if err != nil {
				t.Fatalf("Order(%d): %v", r.OrderID, err)
			}
			got, later := outcomes[i][j], []seckill.Outcome{last[i*size+j]}
			if again[i] != nil {
				later = append(later, again[i][j])
			}
			if got.Status != o.Status || got.Reason != o.Reason || slices.ContainsFunc(later, func(l seckill.Outcome) bool { return l != got }) {
				t.Fatalf("order %d: ApplyOrders said %+v, then %+v; the database holds %s %q", r.OrderID, got, later, o.Status, o.Reason)
			}
			if o.Status != seckill.OrderConfirmed {
				continue
			}
			if other, ok := buyers[r.UserID]; ok && other != r.OrderID {
				t.Fatalf("user %d holds orders %d and %d", r.UserID, other, r.OrderID)
			}
			buyers[r.UserID] = r.OrderID
		}
	}
	if len(buyers) != stock {
		t.Errorf("%d buyers, want %d", len(buyers), stock)
	}
	checkRemaining(t, s, a.ID, 0)
}

// testApplyOrdersRacingFailOrders confirms and fails the same new orders at
// the same moment, as a worker and the dead-letter path may: each order must
// end up either confirmed or failed, and both calls must say which.
func testApplyOrdersRacingFailOrders(t *testing.T, s seckill.Store) {
	ctx := context.Background()
	a := newActivity(t, s, seckill.MaxStock)
	const rounds, size = 40, 20
	for round := range int64(rounds) {
		batch := make([]seckill.OrderRequest, size)
		for i := range int64(size) {
			batch[i] = req(round*size+i, a.ID, round*size+i)
		}
		reversed := slices.Clone(batch)
		slices.Reverse(reversed)
		var applied, failed []seckill.Outcome
		var applyErr, failErr error
		var wg sync.WaitGroup
		wg.Go(func() { applied, applyErr = s.ApplyOrders(ctx, batch) })
		wg.Go(func() { failed, failErr = s.FailOrders(ctx, reversed, seckill.ReasonPoison) })
		wg.Wait()
		if applyErr != nil || failErr != nil {
			t.Fatalf("ApplyOrders: %v; FailOrders: %v", applyErr, failErr)
		}
		slices.Reverse(failed)
		for i, r := range batch {
			o, err := s.Order(ctx, r.OrderID)
			if err != nil {
				t.Fatalf("Order(%d): %v", r.OrderID, err)
			}
			if applied[i] != failed[i] || applied[i].Status != o.Status || applied[i].Reason != o.Reason {
				t.Fatalf("order %d: ApplyOrders said %+v, FailOrders said %+v, the database holds %s %q",
					r.OrderID, applied[i], failed[i], o.Status, o.Reason)
			}
		}
	}
}

func testFailOrders(t *testing.T, s seckill.Store) {
	ctx := context.Background()
	a := newActivity(t, s, 1)
	checkApply(t, s, []seckill.OrderRequest{req(1, a.ID, 1), req(2, a.ID, 2)}, confirmed, soldOut)
	batch := []seckill.OrderRequest{req(1, a.ID, 1), req(2, a.ID, 2), req(3, a.ID, 3), req(3, a.ID, 3)}
	poison := failed(seckill.ReasonPoison)
	checkFail(t, s, batch, seckill.ReasonPoison, confirmed, soldOut, poison, poison)
	checkFail(t, s, batch, "another_reason", confirmed, soldOut, poison, poison)
	checkOrder(t, s, 1, seckill.OrderConfirmed, "")
	checkOrder(t, s, 3, seckill.OrderFailed, seckill.ReasonPoison)
	checkApply(t, s, []seckill.OrderRequest{req(3, a.ID, 3)}, poison)
	checkRemaining(t, s, a.ID, 0)

	for _, reason := range []string{"", strings.Repeat("r", 33)} {
		if _, err := s.FailOrders(ctx, batch, reason); seckill.ErrorCode(err) != seckill.EINVALID {
			t.Errorf("FailOrders(reason %q) = %v, want %s", reason, err, seckill.EINVALID)
		}
	}
}

// A failed order leaves no row in orders, so the buyer may grab again.
func testGrabAgainAfterFailure(t *testing.T, s seckill.Store) {
	a := newActivity(t, s, 5)
	checkFail(t, s, []seckill.OrderRequest{req(1, a.ID, 7)}, seckill.ReasonPoison, failed(seckill.ReasonPoison))
	checkApply(t, s, []seckill.OrderRequest{req(1, a.ID, 7), req(2, a.ID, 7)}, failed(seckill.ReasonPoison), confirmed)
	checkRemaining(t, s, a.ID, 4)
}

func testOrder(t *testing.T, s seckill.Store) {
	ctx := context.Background()
	a := newActivity(t, s, 1)
	at := time.Date(2030, 3, 4, 5, 6, 7, 891_999_999, time.FixedZone("UTC+1", 3600))
	r1 := seckill.OrderRequest{OrderID: 1 << 62, ActivityID: a.ID, UserID: 1 << 61, CreatedAt: at}
	r2 := seckill.OrderRequest{OrderID: 1<<62 + 1, ActivityID: a.ID, UserID: 5} // no CreatedAt: now
	before := time.Now().Add(-time.Second)
	checkApply(t, s, []seckill.OrderRequest{r1, r2}, confirmed, soldOut)

	got, err := s.Order(ctx, r1.OrderID)
	want := seckill.Order{ID: r1.OrderID, ActivityID: a.ID, UserID: r1.UserID, Status: seckill.OrderConfirmed,
		CreatedAt: time.Date(2030, 3, 4, 4, 6, 7, 891_000_000, time.UTC)}
	if err != nil || got != want {
		t.Errorf("Order(confirmed) = %+v, %v; want %+v", got, err, want)
	}
	got, err = s.Order(ctx, r2.OrderID)
	if err != nil || got.Status != seckill.OrderFailed || got.Reason != seckill.ReasonSoldOut ||
		got.ActivityID != a.ID || got.UserID != 5 || got.CreatedAt.Before(before) || got.CreatedAt.Location() != time.UTC {
		t.Errorf("Order(failed) = %+v, %v; want failed %s, created now in UTC", got, err, seckill.ReasonSoldOut)
	}
	if _, err := s.Order(ctx, 42); seckill.ErrorCode(err) != seckill.ENOTFOUND {
		t.Errorf("Order(unknown) = %v, want %s", err, seckill.ENOTFOUND)
	}
}

// LastOrderID finds the highest id of the activity's range among confirmed
// and failed orders, and nothing of another activity's range.
func testLastOrderID(t *testing.T, s seckill.Store) {
	ctx := context.Background()
	a, b, c := newActivity(t, s, 5), newActivity(t, s, 5), newActivity(t, s, 5)
	id := seckill.OrderID
	checkApply(t, s, []seckill.OrderRequest{req(id(a.ID, 8), a.ID, 1), req(id(a.ID, 12), a.ID, 2), req(id(b.ID, 3), b.ID, 1)},
		confirmed, confirmed, confirmed)
	checkFail(t, s, []seckill.OrderRequest{req(id(a.ID, 99), a.ID, 3)}, seckill.ReasonPoison, failed(seckill.ReasonPoison))
	// An order id of another range that names activity a (an id from
	// before ids named their activity) is not in a's range.
	checkApply(t, s, []seckill.OrderRequest{req(id(c.ID+1, 1000), a.ID, 4)}, confirmed)
	for _, tt := range []struct{ activity, want int64 }{
		{a.ID, id(a.ID, 99)}, // the failed order
		{b.ID, id(b.ID, 3)},
		{c.ID, 0},
	} {
		if got, err := s.LastOrderID(ctx, tt.activity); err != nil || got != tt.want {
			t.Errorf("LastOrderID(%d) = %d, %v; want %d", tt.activity, got, err, tt.want)
		}
	}
}

// RunActivityIDLimit checks that CreateActivity creates the activity with
// id seckill.MaxActivityID and refuses the next one with
// seckill.ErrActivityIDs, leaving no row. setNext makes the engine hand out
// next as the next activity id (after one activity was created).
func RunActivityIDLimit(t *testing.T, s seckill.Store, setNext func(next int64)) {
	ctx := context.Background()
	newActivity(t, s, 1)
	setNext(seckill.MaxActivityID)
	last := newActivity(t, s, 1)
	if last.ID != seckill.MaxActivityID {
		t.Fatalf("activity id %d, want %d (setNext did not take)", last.ID, seckill.MaxActivityID)
	}
	a := seckill.Activity{Name: "one too many", Stock: 1, StartsAt: created, EndsAt: created.Add(time.Hour)}
	err := s.CreateActivity(ctx, &a)
	if seckill.ErrorCode(err) != seckill.EUNAVAILABLE || a.ID != 0 {
		t.Fatalf("CreateActivity past the last id = %v (id %d), want %s", err, a.ID, seckill.EUNAVAILABLE)
	}
	acts, err := s.Activities(ctx, created.Add(-48*time.Hour))
	if err != nil || len(acts) != 2 {
		t.Errorf("activities after the refusal: %d (%v), want 2: the refused one left no row", len(acts), err)
	}
}

// Helpers.

var (
	confirmed = seckill.Outcome{Status: seckill.OrderConfirmed}
	soldOut   = failed(seckill.ReasonSoldOut)
)

func failed(reason string) seckill.Outcome {
	return seckill.Outcome{Status: seckill.OrderFailed, Reason: reason}
}

func duplicate(existing int64) seckill.Outcome {
	return seckill.Outcome{Status: seckill.OrderFailed, Reason: seckill.ReasonDuplicate, ExistingOrderID: existing}
}

var created = time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)

func req(order, activity, user int64) seckill.OrderRequest {
	return seckill.OrderRequest{OrderID: order, ActivityID: activity, UserID: user, CreatedAt: created.Add(time.Duration(order) * time.Millisecond)}
}

func newActivity(t testing.TB, s seckill.Store, stock int64) seckill.Activity {
	t.Helper()
	starts := time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC)
	a := seckill.Activity{Name: "sale", Stock: stock, StartsAt: starts, EndsAt: starts.Add(24 * time.Hour)}
	if err := s.CreateActivity(context.Background(), &a); err != nil {
		t.Fatalf("CreateActivity: %v", err)
	}
	return a
}

func checkActivity(t *testing.T, what string, got, want seckill.Activity) {
	t.Helper()
	if got != want || got.StartsAt.Location() != time.UTC || got.EndsAt.Location() != time.UTC {
		t.Errorf("%s = %+v, want %+v (times in UTC)", what, got, want)
	}
}

func checkApply(t testing.TB, s seckill.Store, batch []seckill.OrderRequest, want ...seckill.Outcome) {
	t.Helper()
	got, err := s.ApplyOrders(context.Background(), batch)
	if err != nil {
		t.Fatalf("ApplyOrders: %v", err)
	}
	checkOutcomes(t, "ApplyOrders", got, want)
}

func checkFail(t *testing.T, s seckill.Store, batch []seckill.OrderRequest, reason string, want ...seckill.Outcome) {
	t.Helper()
	got, err := s.FailOrders(context.Background(), batch, reason)
	if err != nil {
		t.Fatalf("FailOrders: %v", err)
	}
	checkOutcomes(t, "FailOrders", got, want)
}

func checkOutcomes(t testing.TB, what string, got, want []seckill.Outcome) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d outcomes %+v, want %d %+v", what, len(got), got, len(want), want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("%s: outcome %d = %+v, want %+v", what, i, got[i], want[i])
		}
	}
}

func checkRemaining(t *testing.T, s seckill.Store, id, want int64) {
	t.Helper()
	a, err := s.Activity(context.Background(), id)
	if err != nil {
		t.Fatalf("Activity(%d): %v", id, err)
	}
	if a.Remaining != want {
		t.Errorf("activity %d: remaining = %d, want %d", id, a.Remaining, want)
	}
}

func checkBuyers(t *testing.T, s seckill.Store, activityID int64, want []seckill.Buyer) {
	t.Helper()
	got, err := s.Buyers(context.Background(), activityID)
	if err != nil {
		t.Fatalf("Buyers(%d): %v", activityID, err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("Buyers(%d) = %v, want %v", activityID, got, want)
	}
}

func checkOrder(t *testing.T, s seckill.Store, id int64, status seckill.OrderStatus, reason string) {
	t.Helper()
	o, err := s.Order(context.Background(), id)
	if err != nil {
		t.Errorf("Order(%d): %v", id, err)
		return
	}
	if o.Status != status || o.Reason != reason {
		t.Errorf("Order(%d) = %s %q, want %s %q", id, o.Status, o.Reason, status, reason)
	}
}

func names(as []seckill.Activity) []string {
	var ns []string
	for _, a := range as {
		ns = append(ns, a.Name)
	}
	return ns
}

// RunStalledTransaction checks that a session frozen inside a transaction
// cannot hold up an activity's orders: the caller opened s on a URL that
// makes the server end a session idle in a transaction after a short
// while, and stall begins a transaction on one of s's own connections,
// locks the activity's row and leaves the transaction open (as a process
// stopped, or cut off, between BEGIN and COMMIT would). ApplyOrders of the
// activity must then complete while that transaction was never finished
// (it waits for the lock until the server ends the stalled session), and
// finishing it afterwards must fail.
func RunStalledTransaction(t *testing.T, s seckill.Store, stall func(ctx context.Context, activityID int64) (commit func() error, err error)) {
	a := newActivity(t, s, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	commit, err := stall(ctx, a.ID)
	if err != nil {
		t.Fatalf("stall: %v", err)
	}
	// Finished on every path: a pool does not close while one of its
	// connections is in a transaction.
	finish := sync.OnceValue(commit)
	defer finish()
	got, err := s.ApplyOrders(ctx, []seckill.OrderRequest{req(1, a.ID, 1), req(2, a.ID, 2)})
	if err != nil {
		t.Fatalf("ApplyOrders behind a stalled transaction: %v (the server did not end the stalled session within a minute)", err)
	}
	checkOutcomes(t, "ApplyOrders", got, []seckill.Outcome{confirmed, confirmed})
	if err := finish(); err == nil {
		t.Error("the stalled transaction committed after the orders were written: it did not hold the lock they waited for")
	}
	checkRemaining(t, s, a.ID, 1)
	checkBuyers(t, s, a.ID, []seckill.Buyer{{UserID: 1, OrderID: 1}, {UserID: 2, OrderID: 2}})
	// The store goes on: its pool lets go of the ended session.
	checkApply(t, s, []seckill.OrderRequest{req(3, a.ID, 3), req(4, a.ID, 4)}, confirmed, soldOut)
}
