package sale_test

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/sale"
)

// write writes orders as the worker does, confirmed.
func (s *sales) write(t *testing.T, orders ...seckill.OrderRequest) {
	t.Helper()
	if _, err := s.store.ApplyOrders(context.Background(), orders); err != nil {
		t.Fatal(err)
	}
}

func request(a seckill.Activity, oid, uid int64) seckill.OrderRequest {
	return seckill.OrderRequest{OrderID: oid, ActivityID: a.ID, UserID: uid, CreatedAt: seckill.OrderTime(a.StartsAt, oid)}
}

// seqOf reads the last local id Redis issued for the activity.
func (in *instance) seqOf(t *testing.T, a seckill.Activity) int64 {
	t.Helper()
	n, err := in.engine.Client().HGet(context.Background(), in.engine.Keys(a)[0].Meta, "seq").Int64()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestUnknownOrders: 20,000 lookups from 64 goroutines of ids that are no
// order: random garbage, ids of activities that do not exist, ids beyond
// the last one Redis issued for a live sale, outside its window, or beyond
// the last order of a past sale that Redis no longer holds. Each is
// answered not found and none reaches the database: not one call. The
// orders that exist are still found.
func TestUnknownOrders(t *testing.T) {
	s := newSales(t)
	ctx := context.Background()
	// NegativeTTL an hour: the listing of the activities that tells an
	// unknown activity, read once here, is trusted throughout.
	in := s.instance(t, sale.Config{NegativeTTL: time.Hour})
	live := in.create(t, 100)
	confirmed := in.mustGrab(t, live.ID, 1).OrderID
	pending := in.mustGrab(t, live.ID, 2).OrderID
	s.write(t, request(live, confirmed, 1))
	seq := in.seqOf(t, live)

	// A sale that ended an hour ago, which Redis no longer holds (the
	// worker retired it), with one order.
	past := seckill.Activity{Name: "past", Stock: 10, StartsAt: time.Now().Add(-2 * time.Hour), EndsAt: time.Now().Add(-time.Hour)}
	if err := s.store.CreateActivity(ctx, &past); err != nil {
		t.Fatal(err)
	}
	pastOrder := seckill.OrderID(past.ID, 8*1000)
	s.write(t, request(past, pastOrder, 3))

	newest := max(live.ID, past.ID)
	window := func(a seckill.Activity) int64 { return a.EndsAt.Sub(a.StartsAt).Milliseconds() << seckill.OrderSeqBits }
	kinds := []struct {
		name string
		id   func(r *rand.Rand) int64
	}{
		{"random garbage", func(r *rand.Rand) int64 { return 1 + r.Int64N(1<<63-1) }},
		{"an activity that does not exist", func(r *rand.Rand) int64 {
			return seckill.OrderID(newest+1+r.Int64N(seckill.MaxActivityID-newest), 1+r.Int64N(seckill.MaxOrderLocal))
		}},
		{"beyond the last id issued", func(r *rand.Rand) int64 { return seckill.OrderID(live.ID, seq+1+r.Int64N(window(live)-seq)) }},
		{"outside the sale window", func(r *rand.Rand) int64 {
			return seckill.OrderID(live.ID, window(live)+8*live.Stock+8+r.Int64N(1<<30))
		}},
		{"beyond the last order of a past sale", func(r *rand.Rand) int64 {
			return seckill.OrderID(past.ID, seckill.OrderLocal(pastOrder)+1+r.Int64N(window(past)))
		}},
		{"no local part", func(r *rand.Rand) int64 { return seckill.OrderID(1+r.Int64N(newest+10), 0) }},
	}
	// One lookup of each kind first: the activities are read once per
	// instance, and so are the listing and the past sale's last order.
	r := rand.New(rand.NewPCG(1, 2))
	for _, k := range kinds {
		if _, err := in.svc.Order(ctx, k.id(r), 5); seckill.ErrorCode(err) != seckill.ENOTFOUND {
			t.Fatalf("%s: %v, want not found", k.name, err)
		}
	}

	const lookups, workers = 20_000, 64
	before, redisBefore := in.store.all.Load(), in.cmds.N()
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for {
				i := next.Add(1)
				if i > lookups {
					return
				}
				k := kinds[int(i)%len(kinds)]
				oid, uid := k.id(r), r.Int64N(3) // users 1 and 2, and admins
				if _, err := in.svc.Order(ctx, oid, uid); seckill.ErrorCode(err) != seckill.ENOTFOUND {
					t.Errorf("%s: order %d for user %d: %v, want not found", k.name, oid, uid, err)
					return
				}
			}
		})
	}
	wg.Wait()
	calls, cmds := in.store.all.Load()-before, in.cmds.N()-redisBefore
	t.Logf("%d lookups of ids that are no order: %d database calls, %.2f redis commands each", lookups, calls, float64(cmds)/lookups)
	if calls != 0 {
		t.Errorf("%d database calls for %d lookups of ids that are no order, want 0", calls, lookups)
	}

	// The orders that exist are found still, as before the flood.
	for _, c := range []struct {
		oid, uid int64
		want     seckill.OrderStatus
	}{{confirmed, 1, seckill.OrderConfirmed}, {pending, 2, seckill.OrderPending}, {pending, 0, seckill.OrderPending},
		{pastOrder, 3, seckill.OrderConfirmed}, {pastOrder, 0, seckill.OrderConfirmed}} {
		if o, err := in.svc.Order(ctx, c.oid, c.uid); err != nil || o.Status != c.want {
			t.Errorf("order %d for user %d: %+v %v, want %s", c.oid, c.uid, o, err, c.want)
		}
	}
	if _, err := in.svc.Order(ctx, confirmed, 2); seckill.ErrorCode(err) != seckill.ENOTFOUND {
		t.Errorf("user 1's order asked by user 2: %v, want not found", err)
	}
}

// TestPendingNeverUnknown: an order answered 202 and not yet written is
// pending on every instance, even when its id was asked for, and answered
// not found, just before the grab issued it: a lookup of an id beyond the
// last one issued is never remembered. Then it is confirmed, or failed,
// never not found.
func TestPendingNeverUnknown(t *testing.T) {
	s := newSales(t)
	ctx := context.Background()
	a := s.instance(t, sale.Config{})
	b := s.instance(t, sale.Config{NegativeTTL: time.Hour}) // remembers an unknown id for an hour
	act := a.create(t, 10)
	first := a.mustGrab(t, act.ID, 1).OrderID

	// A burst borrowed ids from the next 100 s (see grab.lua): the next
	// grab issues seq + 1, whatever the clock says.
	seq := seckill.OrderLocal(first) + 8*100_000
	if err := a.engine.Client().HSet(ctx, a.engine.Keys(act)[0].Meta, "seq", seq).Err(); err != nil {
		t.Fatal(err)
	}
	want := seckill.OrderID(act.ID, seq+1)
	for _, uid := range []int64{2, 0, 2} {
		if _, err := b.svc.Order(ctx, want, uid); seckill.ErrorCode(err) != seckill.ENOTFOUND {
			t.Fatalf("order %d before it is issued, asked by user %d: %v, want not found", want, uid, err)
		}
	}
	if g := a.mustGrab(t, act.ID, 2); g.OrderID != want {
		t.Fatalf("grab: order %d, want %d (seq + 1)", g.OrderID, want)
	}
	for _, in := range []*instance{b, a} {
		for _, uid := range []int64{2, 0} {
			if o, err := in.svc.Order(ctx, want, uid); err != nil || o.Status != seckill.OrderPending || o.UserID != 2 {
				t.Errorf("the order just issued, asked by user %d: %+v %v, want pending of user 2", uid, o, err)
			}
		}
	}
	// Another user asking is told not found, and remembered so: it never
	// becomes theirs.
	if _, err := b.svc.Order(ctx, want, 3); seckill.ErrorCode(err) != seckill.ENOTFOUND {
		t.Errorf("user 2's order asked by user 3: %v, want not found", err)
	}

	s.write(t, request(act, want, 2))
	for _, uid := range []int64{2, 0} {
		if o, err := b.svc.Order(ctx, want, uid); err != nil || o.Status != seckill.OrderConfirmed {
			t.Errorf("the written order, asked by user %d: %+v %v, want confirmed", uid, o, err)
		}
	}
	if _, err := b.svc.Order(ctx, want, 3); seckill.ErrorCode(err) != seckill.ENOTFOUND {
		t.Errorf("user 2's order asked by user 3 once written: %v, want not found", err)
	}

	// An order that fails: recorded, then its mark given back, as the
	// worker does. It goes from pending to failed.
	doomed := a.mustGrab(t, act.ID, 4).OrderID
	if o, err := b.svc.Order(ctx, doomed, 4); err != nil || o.Status != seckill.OrderPending {
		t.Fatalf("order %d: %+v %v, want pending", doomed, o, err)
	}
	if _, err := s.store.FailOrders(ctx, []seckill.OrderRequest{request(act, doomed, 4)}, seckill.ReasonPoison); err != nil {
		t.Fatal(err)
	}
	if done, err := a.engine.Compensate(ctx, act, 4, doomed, 0); err != nil || !done {
		t.Fatalf("compensate: %v %v", done, err)
	}
	if o, err := b.svc.Order(ctx, doomed, 4); err != nil || o.Status != seckill.OrderFailed {
		t.Errorf("the failed order: %+v %v, want failed", o, err)
	}
}

// TestPendingNeverUnknownCrowd: 300 buyers grab on A; each, as soon as
// answered, asks B for the order (as buyer and as admin) while other
// goroutines ask B for the ids just beyond the last one issued, as those
// same buyers, and a writer confirms the orders as the worker would. No
// order answered 202 is ever not found.
func TestPendingNeverUnknownCrowd(t *testing.T) {
	s := newSales(t)
	ctx := context.Background()
	a := s.instance(t, sale.Config{})
	b := s.instance(t, sale.Config{NegativeTTL: time.Hour})
	act := a.create(t, 1000)
	const buyers = 300

	stop := make(chan struct{})
	var bg sync.WaitGroup
	written := make(chan seckill.OrderRequest, buyers)
	bg.Go(func() { // the writer
		var batch []seckill.OrderRequest
		for {
			select {
			case r := <-written:
				batch = append(batch, r)
				if len(batch) < 10 {
					continue
				}
			case <-stop:
				return
			}
			s.write(t, batch...)
			batch = batch[:0]
		}
	})
	for w := range 4 { // the probes of the next ids
		bg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 9))
			for {
				select {
				case <-stop:
					return
				default:
				}
				seq, err := b.engine.Client().HGet(ctx, b.engine.Keys(act)[0].Meta, "seq").Int64()
				if err != nil {
					t.Error(err)
					return
				}
				for i := range int64(64) {
					_, _ = b.svc.Order(ctx, seckill.OrderID(act.ID, seq+1+i), 1+r.Int64N(buyers))
				}
			}
		})
	}
	var wg sync.WaitGroup
	for uid := int64(1); uid <= buyers; uid++ {
		wg.Go(func() {
			g, err := a.grab(t, act.ID, uid)
			if err != nil || !g.New {
				t.Errorf("grab of user %d: %+v %v", uid, g, err)
				return
			}
			for _, asker := range []int64{uid, 0} {
				o, err := b.svc.Order(ctx, g.OrderID, asker)
				if err != nil || o.UserID != uid || (o.Status != seckill.OrderPending && o.Status != seckill.OrderConfirmed) {
					t.Errorf("order %d of user %d just answered 202, asked by %d: %+v %v, want pending or confirmed",
						g.OrderID, uid, asker, o, err)
				}
			}
			written <- request(act, g.OrderID, uid)
		})
	}
	wg.Wait()
	close(stop)
	bg.Wait()
}

// TestStatusAfterPayCancel: an instance that answered an order confirmed
// (and keeps it for an hour here) answers its own payment and cancellation
// at once, even with lookups of the order under way while it paid; a
// lookup of a kept order costs no database read. Another instance sees the
// change once its OrderTTL has passed.
func TestStatusAfterPayCancel(t *testing.T) {
	s := newSales(t)
	ctx := context.Background()
	cfg := sale.Config{OrderTTL: time.Hour}
	a := s.instance(t, cfg)
	b := s.instance(t, cfg)
	c := s.instance(t, sale.Config{OrderTTL: 20 * time.Millisecond})
	act := seckill.Activity{Name: "paid", Stock: 100, StartsAt: time.Now().Add(-time.Minute),
		EndsAt: time.Now().Add(time.Hour), PayWithin: time.Hour}
	if err := a.svc.CreateActivity(ctx, &act); err != nil {
		t.Fatal(err)
	}
	const n = 100
	orders := make([]int64, n+1)
	for uid := int64(1); uid <= n; uid++ {
		orders[uid] = a.mustGrab(t, act.ID, uid).OrderID
		s.write(t, request(act, orders[uid], uid))
	}
	status := func(in *instance, uid int64) seckill.OrderStatus {
		t.Helper()
		o, err := in.svc.Order(ctx, orders[uid], uid)
		if err != nil {
			t.Fatalf("order of user %d: %v", uid, err)
		}
		return o.Status
	}
	for uid := int64(1); uid <= n; uid++ {
		for _, in := range []*instance{a, b, c} {
			if st := status(in, uid); st != seckill.OrderConfirmed {
				t.Fatalf("order of user %d: %s, want confirmed", uid, st)
			}
		}
	}
	reads := a.store.orders.Load()
	for uid := int64(1); uid <= n; uid++ {
		status(a, uid)
	}
	if got := a.store.orders.Load() - reads; got != 0 {
		t.Errorf("%d database reads for %d lookups of orders kept, want 0", got, n)
	}

	if o, err := a.svc.Pay(ctx, orders[1], 1, "tx-1", ""); err != nil || o.Status != seckill.OrderPaid {
		t.Fatalf("pay: %+v %v", o, err)
	}
	if o, err := a.svc.Cancel(ctx, orders[2], 2); err != nil || o.Status != seckill.OrderCancelled {
		t.Fatalf("cancel: %+v %v", o, err)
	}
	if st := status(a, 1); st != seckill.OrderPaid {
		t.Errorf("after paying on this instance: %s, want paid", st)
	}
	if st := status(a, 2); st != seckill.OrderCancelled {
		t.Errorf("after cancelling on this instance: %s, want cancelled", st)
	}
	// b keeps what it read for its OrderTTL (an hour): the bound on what
	// another instance may answer.
	if st := status(b, 1); st != seckill.OrderConfirmed {
		t.Errorf("another instance within its OrderTTL: %s, want confirmed still (kept)", st)
	}
	testenv.WaitFor(t, "the payment seen by an instance whose OrderTTL is 20 ms", func() bool {
		return status(c, 1) == seckill.OrderPaid
	})

	// Lookups under way while the order is paid or cancelled: none leaves
	// the state before the change kept. With room for one order, the
	// lookups of the order and of another one take turns in the memory, so
	// that they keep reading the database, before the change and after.
	d := s.instance(t, sale.Config{OrderTTL: time.Hour, OrderCache: 1})
	for uid := int64(3); uid <= n; uid++ {
		var busy atomic.Bool
		busy.Store(true)
		var wg sync.WaitGroup
		for w := range 6 {
			oid, asker := orders[uid], uid
			if w%3 == 0 {
				oid, asker = orders[1], 1
			}
			wg.Go(func() {
				for busy.Load() {
					_, _ = d.svc.Order(ctx, oid, asker)
				}
			})
		}
		var want seckill.OrderStatus
		var err error
		if uid%2 == 0 {
			want = seckill.OrderCancelled
			_, err = d.svc.Cancel(ctx, orders[uid], uid)
		} else {
			want = seckill.OrderPaid
			_, err = d.svc.Pay(ctx, orders[uid], uid, "tx-"+strconv.FormatInt(uid, 10), "")
		}
		if err != nil {
			t.Fatal(err)
		}
		got := status(d, uid)
		busy.Store(false)
		wg.Wait()
		if got != want {
			t.Errorf("order of user %d right after it was %s on this instance: %s", uid, want, got)
		}
		if got := status(d, uid); got != want {
			t.Errorf("order of user %d once the lookups under way ended: %s, want %s", uid, got, want)
		}
	}
}

// TestUnknownRemembered: an id that Redis issued but that is no order of
// the caller costs one database read, then none for NegativeTTL; the
// memory is bounded by OrderCache, and forgets after NegativeTTL.
func TestUnknownRemembered(t *testing.T) {
	s := newSales(t)
	ctx := context.Background()
	a := s.instance(t, sale.Config{})
	act := a.create(t, 100)
	var orders []int64
	for uid := int64(1); uid <= 20; uid++ {
		orders = append(orders, a.mustGrab(t, act.ID, uid).OrderID)
	}
	// Each order, asked by user 1000, who holds none: issued, not theirs.
	reads := func(in *instance, oid int64) int64 {
		t.Helper()
		before := in.store.orders.Load()
		if _, err := in.svc.Order(ctx, oid, 1000); seckill.ErrorCode(err) != seckill.ENOTFOUND {
			t.Fatalf("order %d asked by user 1000: %v, want not found", oid, err)
		}
		return in.store.orders.Load() - before
	}

	long := s.instance(t, sale.Config{NegativeTTL: time.Hour})
	if n := reads(long, orders[0]); n != 1 {
		t.Errorf("first lookup: %d database reads, want 1", n)
	}
	for range 3 {
		if n := reads(long, orders[0]); n != 0 {
			t.Errorf("lookup again within NegativeTTL: %d database reads, want 0", n)
		}
	}

	small := s.instance(t, sale.Config{NegativeTTL: time.Hour, OrderCache: 4})
	for _, oid := range orders {
		reads(small, oid)
	}
	if n := reads(small, orders[len(orders)-1]); n != 0 {
		t.Errorf("the id asked last: %d database reads, want 0 (remembered)", n)
	}
	if n := reads(small, orders[0]); n != 1 {
		t.Errorf("the id asked first, 19 ids ago with room for 4: %d database reads, want 1 (forgotten)", n)
	}

	brief := s.instance(t, sale.Config{NegativeTTL: 10 * time.Millisecond})
	reads(brief, orders[0])
	time.Sleep(50 * time.Millisecond)
	if n := reads(brief, orders[0]); n != 1 {
		t.Errorf("lookup after NegativeTTL: %d database reads, want 1 (forgotten)", n)
	}
}
