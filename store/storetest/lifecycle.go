package storetest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/store/internal/sqlstore"
)

// The order lifecycle: pay, cancel, expire, the returns outbox, and what
// the database tells about orders afterwards.

// window is the payment window of the tests' activities: long enough that
// no order expires unless a test says "now" is past its deadline.
const window = time.Hour

// newSale creates an activity of stock units with a payment window and the
// rebuy option.
func newSale(t testing.TB, s seckill.Store, stock int64, payWithin time.Duration, rebuy bool) seckill.Activity {
	t.Helper()
	return newSaleOf(t, s, seckill.Activity{Stock: stock, PayWithin: payWithin, Rebuy: rebuy})
}

// newSaleOf creates activity a, named "sale" and open for a day from 2030.
func newSaleOf(t testing.TB, s seckill.Store, a seckill.Activity) seckill.Activity {
	t.Helper()
	starts := time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC)
	a.Name, a.StartsAt, a.EndsAt = "sale", starts, starts.Add(24*time.Hour)
	if err := s.CreateActivity(context.Background(), &a); err != nil {
		t.Fatalf("CreateActivity: %v", err)
	}
	return a
}

// confirm writes orders id of user id for each id (order id = user id) and
// requires them all confirmed; it returns the orders as the database holds
// them.
func confirm(t testing.TB, s seckill.Store, a seckill.Activity, ids ...int64) []seckill.Order {
	t.Helper()
	batch := make([]seckill.OrderRequest, len(ids))
	want := make([]seckill.Outcome, len(ids))
	for i, id := range ids {
		batch[i], want[i] = req(id, a.ID, id), confirmed
	}
	checkApply(t, s, batch, want...)
	os := make([]seckill.Order, len(ids))
	for i, id := range ids {
		os[i] = order(t, s, id)
	}
	return os
}

func order(t testing.TB, s seckill.Store, id int64) seckill.Order {
	t.Helper()
	o, err := s.Order(context.Background(), id)
	if err != nil {
		t.Fatalf("Order(%d): %v", id, err)
	}
	return o
}

// wantCode fails t unless err carries code.
func wantCode(t testing.TB, what string, err error, code string) {
	t.Helper()
	if got := seckill.ErrorCode(err); got != code {
		t.Errorf("%s: error %v (code %q), want code %q", what, err, got, code)
	}
}

func pay(s seckill.Store, id, uid int64, key string, now time.Time) (seckill.Order, error) {
	return s.Pay(context.Background(), seckill.Payment{OrderID: id, UserID: uid, Ref: "psp-" + fmt.Sprint(id), Key: key, Now: now})
}

func checkCounts(t testing.TB, s seckill.Store, activityID int64, want seckill.StateCounts) {
	t.Helper()
	got, err := s.StateCounts(context.Background(), activityID)
	if err != nil {
		t.Fatalf("StateCounts: %v", err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("StateCounts(%d) = %v, want %v", activityID, got, want)
	}
}

// testPayBy: a confirmed order's deadline is its confirmation time plus
// the activity's window; without a window it has none.
func testPayBy(t *testing.T, s seckill.Store) {
	a := newSale(t, s, 5, 90*time.Second, true)
	none := newSale(t, s, 5, 0, true)
	before := time.Now().Truncate(time.Millisecond)
	o := confirm(t, s, a, 1)[0]
	after := time.Now()
	if o.PayBy.Before(before.Add(90*time.Second)) || o.PayBy.After(after.Add(90*time.Second)) || o.PayBy.Location() != time.UTC {
		t.Errorf("PayBy = %v, want confirmation time (%v to %v) + 90s, in UTC", o.PayBy, before, after)
	}
	if o.Status != seckill.OrderConfirmed || !o.PaidAt.IsZero() || !o.ClosedAt.IsZero() || o.PaymentRef != "" || o.PaymentKey != "" {
		t.Errorf("new order = %+v, want confirmed with only a deadline", o)
	}
	if o := confirm(t, s, none, 2)[0]; !o.PayBy.IsZero() {
		t.Errorf("PayBy = %v in a sale without a payment step, want zero", o.PayBy)
	}
	got, err := s.Activity(context.Background(), a.ID)
	if err != nil || got.PayWithin != 90*time.Second || !got.Rebuy {
		t.Errorf("Activity = %+v, %v; want PayWithin 90s and Rebuy", got, err)
	}
}

func testPay(t *testing.T, s seckill.Store) {
	ctx := context.Background()
	a := newSale(t, s, 5, window, true)
	o := confirm(t, s, a, 1)[0]
	now := time.Now()
	p := seckill.Payment{OrderID: 1, UserID: 1, Ref: "psp-ref-1", Key: "click-1", Now: now}
	got, err := s.Pay(ctx, p)
	want := o
	want.Status, want.PaidAt, want.PaymentRef, want.PaymentKey = seckill.OrderPaid, now.UTC().Truncate(time.Millisecond), "psp-ref-1", "click-1"
	if err != nil || got != want {
		t.Fatalf("Pay = %+v, %v;\nwant %+v", got, err, want)
	}
	if got := order(t, s, 1); got != want {
		t.Errorf("Order after Pay = %+v, want %+v", got, want)
	}
	// The same call again, later: the first answer, no second effect.
	p.Now = now.Add(time.Minute)
	if again, err := s.Pay(ctx, p); err != nil || again != want {
		t.Errorf("Pay repeated = %+v, %v; want %+v", again, err, want)
	}
	// By an admin (uid 0): the same key, the same answer.
	p.UserID = 0
	if again, err := s.Pay(ctx, p); err != nil || again != want {
		t.Errorf("Pay repeated by an admin = %+v, %v; want %+v", again, err, want)
	}
	// The same key with another reference is another call: refused, and
	// the first payment stays.
	p.Ref = "psp-ref-other"
	o, err = s.Pay(ctx, p)
	wantCode(t, "Pay under the same key with another reference", err, seckill.EKEYREUSED)
	if o != (seckill.Order{}) || order(t, s, 1) != want {
		t.Errorf("Pay under the same key with another reference: returned %+v, the order is %+v; want nothing, and %+v", o, order(t, s, 1), want)
	}
	p.Key = "click-2"
	_, err = s.Pay(ctx, p)
	wantCode(t, "Pay under another key", err, seckill.EORDERPAID)
	checkRemaining(t, s, a.ID, 4)
	checkCounts(t, s, a.ID, seckill.StateCounts{seckill.OrderPaid: 1})

	// Without a key, the order id is the key: a keyless repeat is the same
	// call, a keyed one another.
	confirm(t, s, a, 2)
	first, err := pay(s, 2, 2, "", now)
	if err != nil || first.PaymentKey != "" || first.Status != seckill.OrderPaid {
		t.Fatalf("Pay without key = %+v, %v", first, err)
	}
	if again, err := pay(s, 2, 2, "", now); err != nil || again != first {
		t.Errorf("keyless Pay repeated = %+v, %v; want %+v", again, err, first)
	}
	_, err = s.Pay(ctx, seckill.Payment{OrderID: 2, UserID: 2, Ref: first.PaymentRef + "-other", Now: now})
	wantCode(t, "keyless Pay repeated with another reference", err, seckill.EKEYREUSED)
	_, err = pay(s, 2, 2, "k", now)
	wantCode(t, "keyed Pay of an order paid without key", err, seckill.EORDERPAID)
}

// testPayRefusals: every refusal of Pay, with its code, and none changes
// anything.
func testPayRefusals(t *testing.T, s seckill.Store) {
	ctx := context.Background()
	a := newSale(t, s, 10, window, true)
	short := newSale(t, s, 10, time.Minute, true)
	none := newSale(t, s, 10, 0, true)
	deadline := confirm(t, s, a, 1, 2, 4)[2].PayBy
	three := confirm(t, s, short, 3)[0]
	confirm(t, s, none, 5)
	checkFail(t, s, []seckill.OrderRequest{req(6, a.ID, 6)}, seckill.ReasonPoison, failed(seckill.ReasonPoison))
	now := time.Now()
	if _, _, err := s.Cancel(ctx, 2, 2, now); err != nil {
		t.Fatal(err)
	}
	if rets, err := s.Expire(ctx, seckill.Fence{Name: "x", Token: 1}, three.PayBy, 10); err != nil || len(rets) != 1 || rets[0].OrderID != 3 {
		t.Fatalf("Expire = %v, %v; want order 3 expired", rets, err)
	}
	for _, tt := range []struct {
		what string
		p    seckill.Payment
		code string
	}{
		{"unknown order", seckill.Payment{OrderID: 99, Ref: "r", Now: now}, seckill.ENOTFOUND},
		{"another user's order", seckill.Payment{OrderID: 1, UserID: 7, Ref: "r", Now: now}, seckill.ENOTFOUND},
		{"cancelled", seckill.Payment{OrderID: 2, UserID: 2, Ref: "r", Now: now}, seckill.EORDERCANCELLED},
		{"expired", seckill.Payment{OrderID: 3, Ref: "r", Now: now}, seckill.EORDEREXPIRED},
		{"at the deadline", seckill.Payment{OrderID: 4, Ref: "r", Now: deadline}, seckill.EORDEREXPIRED},
		{"past the deadline", seckill.Payment{OrderID: 4, Ref: "r", Now: deadline.Add(time.Hour)}, seckill.EORDEREXPIRED},
		{"no payment step", seckill.Payment{OrderID: 5, UserID: 5, Ref: "r", Now: now}, seckill.ENOTPAYABLE},
		{"failed", seckill.Payment{OrderID: 6, UserID: 6, Ref: "r", Now: now}, seckill.ENOTPAYABLE},
		{"failed, of another user", seckill.Payment{OrderID: 6, UserID: 7, Ref: "r", Now: now}, seckill.ENOTFOUND},
		{"no ref", seckill.Payment{OrderID: 1, Now: now}, seckill.EINVALID},
		{"ref too long", seckill.Payment{OrderID: 1, Ref: strings.Repeat("r", 129), Now: now}, seckill.EINVALID},
		{"key too long", seckill.Payment{OrderID: 1, Ref: "r", Key: strings.Repeat("k", 129), Now: now}, seckill.EINVALID},
		{"ref not text", seckill.Payment{OrderID: 1, Ref: "r\x00", Now: now}, seckill.EINVALID},
		{"key not UTF-8", seckill.Payment{OrderID: 1, Ref: "r", Key: "\xff", Now: now}, seckill.EINVALID},
	} {
		o, err := s.Pay(ctx, tt.p)
		wantCode(t, "Pay of "+tt.what, err, tt.code)
		if o != (seckill.Order{}) {
			t.Errorf("Pay of %s returned an order with its error: %+v", tt.what, o)
		}
	}
	// Bounds are inclusive.
	if _, err := s.Pay(ctx, seckill.Payment{OrderID: 4, Ref: strings.Repeat("r", 128), Key: strings.Repeat("k", 128), Now: deadline.Add(-time.Millisecond)}); err != nil {
		t.Errorf("Pay just before the deadline with 128-byte ref and key: %v", err)
	}
	for id, st := range map[int64]seckill.OrderStatus{1: seckill.OrderConfirmed, 2: seckill.OrderCancelled, 3: seckill.OrderExpired, 5: seckill.OrderConfirmed} {
		if o := order(t, s, id); o.Status != st || !o.PaidAt.IsZero() {
			t.Errorf("order %d after refused payments: %s paid at %v, want %s unpaid", id, o.Status, o.PaidAt, st)
		}
	}
	checkRemaining(t, s, a.ID, 8)
}

func testCancel(t *testing.T, s seckill.Store) {
	ctx := context.Background()
	a := newSale(t, s, 3, window, true)
	o := confirm(t, s, a, 1)[0]
	checkRemaining(t, s, a.ID, 2)
	now := time.Now()
	got, ret, err := s.Cancel(ctx, 1, 1, now)
	want := o
	want.Status, want.ClosedAt = seckill.OrderCancelled, now.UTC().Truncate(time.Millisecond)
	wantRet := seckill.Return{OrderID: 1, ActivityID: a.ID, UserID: 1, Status: seckill.OrderCancelled, Rebuy: true, Buckets: 1, ReturnedAt: want.ClosedAt}
	if err != nil || got != want || ret != wantRet {
		t.Fatalf("Cancel = %+v, %+v, %v;\nwant %+v, %+v", got, ret, err, want, wantRet)
	}
	checkRemaining(t, s, a.ID, 3)
	if got := order(t, s, 1); got != want {
		t.Errorf("Order after Cancel = %+v, want %+v", got, want)
	}
	// Repeated, later, by an admin: the same answer, no second unit.
	for _, uid := range []int64{1, 0} {
		again, r, err := s.Cancel(ctx, 1, uid, now.Add(time.Minute))
		if err != nil || again != want || r != wantRet {
			t.Errorf("Cancel repeated (uid %d) = %+v, %+v, %v; want the first answer", uid, again, r, err)
		}
	}
	checkRemaining(t, s, a.ID, 3)
	checkPending(t, s, wantRet)
	checkCounts(t, s, a.ID, seckill.StateCounts{seckill.OrderCancelled: 1})

	// An admin cancels any user's order; an order of a sale without a
	// payment step can be cancelled too.
	none := newSale(t, s, 1, 0, false)
	confirm(t, s, none, 2)
	checkRemaining(t, s, none.ID, 0)
	if _, r, err := s.Cancel(ctx, 2, 0, now); err != nil || r.Rebuy || r.UserID != 2 {
		t.Errorf("admin Cancel = %+v, %v; want a return of user 2 without rebuy", r, err)
	}
	checkRemaining(t, s, none.ID, 1)
}

func testCancelRefusals(t *testing.T, s seckill.Store) {
	ctx := context.Background()
	a := newSale(t, s, 10, window, true)
	os := confirm(t, s, a, 1, 2)
	checkFail(t, s, []seckill.OrderRequest{req(3, a.ID, 3)}, seckill.ReasonPoison, failed(seckill.ReasonPoison))
	now := time.Now()
	if _, err := pay(s, 1, 1, "", now); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Expire(ctx, seckill.Fence{Name: "x", Token: 1}, os[1].PayBy, 5); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		what    string
		id, uid int64
		code    string
	}{
		{"unknown order", 99, 0, seckill.ENOTFOUND},
		{"another user's order", 1, 7, seckill.ENOTFOUND},
		{"paid", 1, 1, seckill.EORDERPAID},
		{"expired", 2, 2, seckill.EORDEREXPIRED},
		{"failed", 3, 3, seckill.ENOTCANCELLABLE},
		{"failed, of another user", 3, 4, seckill.ENOTFOUND},
	} {
		o, r, err := s.Cancel(ctx, tt.id, tt.uid, now)
		wantCode(t, "Cancel of "+tt.what, err, tt.code)
		if o != (seckill.Order{}) || r != (seckill.Return{}) {
			t.Errorf("Cancel of %s returned %+v, %+v with its error", tt.what, o, r)
		}
	}
	checkRemaining(t, s, a.ID, 9) // order 2's unit came back, once
	checkCounts(t, s, a.ID, seckill.StateCounts{seckill.OrderPaid: 1, seckill.OrderExpired: 1, seckill.OrderFailed: 1})
}

func testExpire(t *testing.T, s seckill.Store) {
	ctx := context.Background()
	// a's stock is in buckets: its returns say so.
	a := newSaleOf(t, s, seckill.Activity{Stock: 10, PayWithin: window, Rebuy: true, Buckets: 4})
	b := newSale(t, s, 10, 2*window, false)
	none := newSale(t, s, 10, 0, true)
	os := confirm(t, s, a, 1, 2, 3, 4)
	confirm(t, s, b, 5)
	confirm(t, s, none, 6)
	f := seckill.Fence{Name: "expiry", Token: 7}
	if _, err := pay(s, 2, 2, "", time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Cancel(ctx, 3, 3, time.Now()); err != nil {
		t.Fatal(err)
	}
	// Before the deadline nothing is due.
	if rets, err := s.Expire(ctx, f, os[0].PayBy.Add(-time.Millisecond), 10); err != nil || len(rets) != 0 {
		t.Fatalf("Expire before the deadline = %v, %v; want none", rets, err)
	}
	// At the deadline of a's orders: 1 and 4 (not the paid, the cancelled,
	// b's later one, nor the one without a deadline), oldest first, by the
	// limit.
	at := os[3].PayBy
	rets, err := s.Expire(ctx, f, at, 1)
	if err != nil || len(rets) != 1 || rets[0].OrderID != 1 {
		t.Fatalf("Expire(limit 1) = %+v, %v; want order 1", rets, err)
	}
	want := seckill.Return{OrderID: 1, ActivityID: a.ID, UserID: 1, Status: seckill.OrderExpired, Rebuy: true, Buckets: 4, ReturnedAt: at}
	if rets[0] != want {
		t.Errorf("return = %+v, want %+v", rets[0], want)
	}
	o := order(t, s, 1)
	if o.Status != seckill.OrderExpired || !o.ClosedAt.Equal(at) || !o.PayBy.Equal(os[0].PayBy) {
		t.Errorf("expired order = %+v, want expired and closed at %v", o, at)
	}
	rets, err = s.Expire(ctx, f, at, 10)
	if err != nil || len(rets) != 1 || rets[0].OrderID != 4 {
		t.Fatalf("Expire = %+v, %v; want order 4", rets, err)
	}
	if rets, err := s.Expire(ctx, f, at, 10); err != nil || len(rets) != 0 {
		t.Errorf("Expire again = %+v, %v; want none", rets, err)
	}
	checkRemaining(t, s, a.ID, 9) // paid 2 holds a unit
	checkCounts(t, s, a.ID, seckill.StateCounts{seckill.OrderExpired: 2, seckill.OrderPaid: 1, seckill.OrderCancelled: 1})

	// Much later: b's order, without rebuy.
	rets, err = s.Expire(ctx, f, at.Add(3*window), 10)
	if err != nil || len(rets) != 1 || rets[0].OrderID != 5 || rets[0].Rebuy {
		t.Fatalf("Expire later = %+v, %v; want order 5 without rebuy", rets, err)
	}
	checkRemaining(t, s, b.ID, 10)
	checkApply(t, s, []seckill.OrderRequest{req(8, b.ID, 5)}, duplicate(5)) // no rebuy
	if o := order(t, s, 6); o.Status != seckill.OrderConfirmed {
		t.Errorf("order without deadline: %s, want confirmed", o.Status)
	}
	checkApply(t, s, []seckill.OrderRequest{req(7, a.ID, 1)}, confirmed) // rebuy

	for _, tt := range []struct {
		f     seckill.Fence
		limit int
	}{
		{seckill.Fence{Name: "", Token: 1}, 1},
		{seckill.Fence{Name: strings.Repeat("n", 65), Token: 1}, 1},
		{f, 0},
		{f, 100_000},
	} {
		_, err := s.Expire(ctx, tt.f, at, tt.limit)
		wantCode(t, fmt.Sprintf("Expire(%q, limit %d)", tt.f.Name, tt.limit), err, seckill.EINVALID)
	}
}

// testExpireFence: a writer whose token is lower than one the database saw
// for the same name writes nothing; names are independent; the current
// holder writes again and again.
func testExpireFence(t *testing.T, s seckill.Store) {
	ctx := context.Background()
	a := newSale(t, s, 10, window, true)
	os := confirm(t, s, a, 1, 2, 3)
	at := os[2].PayBy
	expire := func(name string, token int64, limit int) ([]seckill.Return, error) {
		return s.Expire(ctx, seckill.Fence{Name: name, Token: token}, at, limit)
	}
	if rets, err := expire("leader", 5, 1); err != nil || len(rets) != 1 {
		t.Fatalf("token 5: %v, %v", rets, err)
	}
	if rets, err := expire("leader", 4, 1); !errors.Is(err, seckill.ErrFenced) || rets != nil {
		t.Errorf("token 4 after 5: %v, %v; want ErrFenced", rets, err)
	}
	if rets, err := expire("leader", 5, 1); err != nil || len(rets) != 1 {
		t.Errorf("token 5 again: %v, %v", rets, err)
	}
	if rets, err := expire("other", 1, 0); seckill.ErrorCode(err) != seckill.EINVALID {
		t.Errorf("limit 0: %v, %v", rets, err)
	}
	if rets, err := expire("leader", 6, 1); err != nil || len(rets) != 1 {
		t.Errorf("token 6: %v, %v", rets, err)
	}
	// A stale writer is refused even with nothing to expire, and writes
	// nothing: the order it would have expired stays confirmed.
	confirm(t, s, a, 4)
	if _, err := s.Expire(ctx, seckill.Fence{Name: "leader", Token: 5}, at.Add(2*window), 10); !errors.Is(err, seckill.ErrFenced) {
		t.Errorf("token 5 after 6: %v, want ErrFenced", err)
	}
	if o := order(t, s, 4); o.Status != seckill.OrderConfirmed {
		t.Errorf("order 4 after a fenced Expire: %s, want confirmed", o.Status)
	}
	// Another lock name is another fence.
	if rets, err := s.Expire(ctx, seckill.Fence{Name: "other", Token: 1}, at.Add(2*window), 10); err != nil || len(rets) != 1 {
		t.Errorf("another name: %v, %v", rets, err)
	}
	checkRemaining(t, s, a.ID, 10)
}

// testPayRacingExpire: buyers pay at the last valid moment while three
// expirers run, the newest lock holder fencing out the oldest, and buyers
// cancel some orders: every order ends paid, cancelled or expired, every
// answer matches the end state, no stale expirer writes after a newer one
// did, and every unit is accounted for.
func testPayRacingExpire(t *testing.T, s seckill.Store) {
	ctx := context.Background()
	const n = 120
	a := newSale(t, s, n, window, true)
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = int64(i + 1)
	}
	os := confirm(t, s, a, ids...)
	last := os[0].PayBy
	for _, o := range os {
		if o.PayBy.After(last) {
			last = o.PayBy
		}
	}

	var (
		mu      sync.Mutex
		paid    = map[int64]bool{}
		expired = map[int64]bool{}
		cancels = map[int64]bool{}
		fenced  atomic.Int64
	)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 6 {
		wg.Go(func() {
			for i := g; i < n; i += 6 {
				o := os[i]
				if i%10 == 0 {
					_, _, err := s.Cancel(ctx, o.ID, o.UserID, time.Now())
					switch seckill.ErrorCode(err) {
					case "":
						mu.Lock()
						cancels[o.ID] = true
						mu.Unlock()
					case seckill.EORDEREXPIRED:
					default:
						errs <- fmt.Errorf("Cancel(%d): %w", o.ID, err)
					}
					continue
				}
				_, err := pay(s, o.ID, o.UserID, "", o.PayBy.Add(-time.Millisecond))
				switch seckill.ErrorCode(err) {
				case "":
					mu.Lock()
					paid[o.ID] = true
					mu.Unlock()
				case seckill.EORDEREXPIRED:
				default:
					errs <- fmt.Errorf("Pay(%d): %w", o.ID, err)
				}
			}
		})
	}
	// Expirers under one lock name: tokens 1 and 2 from the start, 3
	// after a while. Once a call under a higher token returned, a call
	// under a lower one that begins afterwards must be refused.
	// They start once some orders are paid, and token 3 once another
	// wrote, so that every side has a share whatever the scheduling.
	var highest atomic.Int64
	for _, token := range []int64{1, 2, 3} {
		wg.Go(func() {
			for done := 0; done < n/20; {
				time.Sleep(time.Millisecond)
				mu.Lock()
				done = len(paid)
				mu.Unlock()
			}
			for token == 3 && highest.Load() == 0 {
				time.Sleep(time.Millisecond)
			}
			for {
				seen := highest.Load()
				rets, err := s.Expire(ctx, seckill.Fence{Name: "expiry", Token: token}, last, 7)
				if errors.Is(err, seckill.ErrFenced) {
					fenced.Add(1)
					if token == 3 {
						errs <- errors.New("the newest token was fenced")
					}
					return
				}
				if err != nil {
					errs <- fmt.Errorf("Expire(token %d): %w", token, err)
					return
				}
				if seen > token {
					errs <- fmt.Errorf("token %d wrote after token %d had written", token, seen)
				}
				for {
					h := highest.Load()
					if h >= token || highest.CompareAndSwap(h, token) {
						break
					}
				}
				mu.Lock()
				for _, r := range rets {
					if expired[r.OrderID] {
						errs <- fmt.Errorf("order %d expired twice", r.OrderID)
					}
					expired[r.OrderID] = true
				}
				mu.Unlock()
				if len(rets) == 0 && token == 3 {
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := fenced.Load(); n != 2 {
		t.Errorf("%d expirers were fenced out, want tokens 1 and 2 once token 3 wrote", n)
	}
	// The last word: anything still confirmed is due.
	if rets, err := s.Expire(ctx, seckill.Fence{Name: "expiry", Token: 3}, last, 500); err != nil {
		t.Fatal(err)
	} else {
		for _, r := range rets {
			expired[r.OrderID] = true
		}
	}

	var live int64
	for _, o := range os {
		got := order(t, s, o.ID)
		want := seckill.OrderExpired
		switch {
		case paid[o.ID]:
			want = seckill.OrderPaid
			live++
		case cancels[o.ID]:
			want = seckill.OrderCancelled
		}
		if got.Status != want || (want == seckill.OrderExpired) != expired[o.ID] {
			t.Errorf("order %d: %s (paid %v, cancelled %v, expired %v)", o.ID, got.Status, paid[o.ID], cancels[o.ID], expired[o.ID])
		}
	}
	checkRemaining(t, s, a.ID, n-live)
	counts := seckill.StateCounts{seckill.OrderPaid: live, seckill.OrderCancelled: int64(len(cancels)),
		seckill.OrderExpired: int64(n - int(live) - len(cancels))}
	maps.DeleteFunc(counts, func(_ seckill.OrderStatus, n int64) bool { return n == 0 })
	checkCounts(t, s, a.ID, counts)
	pending, err := s.PendingReturns(ctx, 500)
	if err != nil || int64(len(pending)) != n-live {
		t.Errorf("PendingReturns: %d, %v; want one per returned order, %d", len(pending), err, n-live)
	}
	t.Logf("%d paid, %d cancelled, %d expired; %d stale expirers fenced out", live, len(cancels), n-int(live)-len(cancels), fenced.Load())
}

// tick waits until the clock reaches the next millisecond, so that orders
// confirmed afterwards get later deadlines than those confirmed before.
func tick() {
	for m := time.Now().UnixMilli(); time.Now().UnixMilli() == m; {
		time.Sleep(100 * time.Microsecond)
	}
}

// testDoubleClickPay: 50 concurrent payments of one order: with one key,
// one effect and 50 identical answers; with 50 keys, one success and 49
// refusals.
func testDoubleClickPay(t *testing.T, s seckill.Store) {
	a := newSale(t, s, 5, window, true)
	confirm(t, s, a, 1, 2)
	const clicks = 50
	now := time.Now()
	type answer struct {
		o    seckill.Order
		code string
	}
	click := func(id int64, key func(i int) string) []answer {
		answers := make([]answer, clicks)
		var wg sync.WaitGroup
		for i := range clicks {
			wg.Go(func() {
				o, err := pay(s, id, id, key(i), now.Add(time.Duration(i)*time.Millisecond))
				answers[i] = answer{o, seckill.ErrorCode(err)}
			})
		}
		wg.Wait()
		return answers
	}

	answers := click(1, func(int) string { return "the-click" })
	stored := order(t, s, 1)
	if stored.Status != seckill.OrderPaid {
		t.Fatalf("order 1: %s, want paid", stored.Status)
	}
	for i, ans := range answers {
		if ans.code != "" || ans.o != stored {
			t.Errorf("click %d: %+v (%q), want %+v", i, ans.o, ans.code, stored)
		}
	}

	answers = click(2, func(i int) string { return fmt.Sprint("key-", i) })
	stored = order(t, s, 2)
	wins := 0
	for i, ans := range answers {
		switch ans.code {
		case "":
			wins++
			if ans.o != stored || stored.PaymentKey != fmt.Sprint("key-", i) {
				t.Errorf("the winning click %d: %+v, the database holds %+v", i, ans.o, stored)
			}
		case seckill.EORDERPAID:
		default:
			t.Errorf("click %d: %q, want success or %s", i, ans.code, seckill.EORDERPAID)
		}
	}
	if wins != 1 {
		t.Errorf("%d clicks paid order 2, want 1", wins)
	}
	checkRemaining(t, s, a.ID, 3)
}

// testDoubleClickCancel: 50 concurrent cancels of one order: one effect
// (one unit back, one return), 50 identical answers.
func testDoubleClickCancel(t *testing.T, s seckill.Store) {
	ctx := context.Background()
	a := newSale(t, s, 5, window, true)
	confirm(t, s, a, 1, 2)
	const clicks = 50
	type answer struct {
		o   seckill.Order
		r   seckill.Return
		err error
	}
	answers := make([]answer, clicks)
	now := time.Now()
	var wg sync.WaitGroup
	for i := range clicks {
		wg.Go(func() {
			o, r, err := s.Cancel(ctx, 1, int64(i%2), now.Add(time.Duration(i)*time.Millisecond)) // the buyer, or an admin
			answers[i] = answer{o, r, err}
		})
	}
	wg.Wait()
	stored := order(t, s, 1)
	if stored.Status != seckill.OrderCancelled {
		t.Fatalf("order 1: %s, want cancelled", stored.Status)
	}
	for i, ans := range answers {
		if ans.err != nil || ans.o != stored || ans != answers[0] {
			t.Errorf("click %d: %+v, %+v, %v; want %+v and the same return as click 0", i, ans.o, ans.r, ans.err, stored)
		}
	}
	checkRemaining(t, s, a.ID, 4)
	checkPending(t, s, answers[0].r)
}

// testRebuy: in an activity with rebuy, a buyer whose order was returned
// buys again; without, the returned order still blocks them (and holds no
// unit).
func testRebuy(t *testing.T, s seckill.Store) {
	ctx := context.Background()
	for _, rebuy := range []bool{true, false} {
		a := newSale(t, s, 2, window, rebuy)
		base := a.ID * 1000
		confirm(t, s, a, base+1)
		if _, _, err := s.Cancel(ctx, base+1, base+1, time.Now()); err != nil {
			t.Fatal(err)
		}
		again := req(base+2, a.ID, base+1)
		if rebuy {
			checkApply(t, s, []seckill.OrderRequest{again}, confirmed)
			checkRemaining(t, s, a.ID, 1)
			if _, err := pay(s, base+2, base+1, "", time.Now()); err != nil {
				t.Fatal(err)
			}
			// Another buyer's order expires, and they buy again.
			os := confirm(t, s, a, base+3)
			if _, err := s.Expire(ctx, seckill.Fence{Name: "e", Token: 1}, os[0].PayBy, 10); err != nil {
				t.Fatal(err)
			}
			checkApply(t, s, []seckill.OrderRequest{req(base+4, a.ID, base+1)}, duplicate(base+2))
			checkApply(t, s, []seckill.OrderRequest{req(base+5, a.ID, base+3)}, confirmed)
			checkBuyers(t, s, a.ID, []seckill.Buyer{{UserID: base + 1, OrderID: base + 2}, {UserID: base + 3, OrderID: base + 5}})
		} else {
			checkApply(t, s, []seckill.OrderRequest{again}, duplicate(base+1))
			checkRemaining(t, s, a.ID, 2)
			checkBuyers(t, s, a.ID, nil)
			l, err := s.Load(ctx, a.ID)
			if err != nil || !slices.Equal(l.Buyers, []seckill.Buyer{{UserID: base + 1, OrderID: base + 1}}) {
				t.Errorf("Load without rebuy: buyers %v, %v; want the cancelled order's buyer", l.Buyers, err)
			}
		}
	}
}

// testLoad: one snapshot of what Redis is rebuilt from.
func testLoad(t *testing.T, s seckill.Store) {
	ctx := context.Background()
	if _, err := s.Load(ctx, 12345); seckill.ErrorCode(err) != seckill.ENOTFOUND {
		t.Errorf("Load(unknown) = %v, want %s", err, seckill.ENOTFOUND)
	}
	for _, rebuy := range []bool{true, false} {
		a := newSale(t, s, 10, window, rebuy)
		id := func(n int64) int64 { return seckill.OrderID(a.ID, n) }
		checkApply(t, s, []seckill.OrderRequest{req(id(4), a.ID, 4)}, confirmed) // the first deadline
		tick()
		checkApply(t, s, []seckill.OrderRequest{req(id(1), a.ID, 1), req(id(2), a.ID, 2), req(id(3), a.ID, 3)},
			confirmed, confirmed, confirmed)
		checkFail(t, s, []seckill.OrderRequest{req(id(9), a.ID, 9)}, seckill.ReasonPoison, failed(seckill.ReasonPoison))
		if _, err := pay(s, id(2), 2, "", time.Now()); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.Cancel(ctx, id(3), 3, time.Now()); err != nil {
			t.Fatal(err)
		}
		o4 := order(t, s, id(4))
		// (In the second round, this expires the first round's order 1 too.)
		if rets, err := s.Expire(ctx, seckill.Fence{Name: "e", Token: 1}, o4.PayBy, 10); err != nil || !slices.ContainsFunc(rets, func(r seckill.Return) bool { return r.OrderID == id(4) }) {
			t.Fatalf("Expire = %v, %v; want order %d among them", rets, err, id(4))
		}
		l, err := s.Load(ctx, a.ID)
		if err != nil {
			t.Fatalf("Load: %v", err)
		}
		a.Remaining = 8
		checkActivity(t, "Load's activity", l.Activity, a)
		want := []seckill.Buyer{{UserID: 1, OrderID: id(1)}, {UserID: 2, OrderID: id(2)}}
		if !rebuy {
			want = append(want, seckill.Buyer{UserID: 3, OrderID: id(3)}, seckill.Buyer{UserID: 4, OrderID: id(4)})
		}
		if !slices.Equal(l.Buyers, want) || !slices.Equal(l.Returned, []int64{id(3), id(4)}) || l.LastOrderID != id(9) {
			t.Errorf("Load (rebuy %v) = buyers %v, returned %v, last %d;\nwant %v, %v, %d", rebuy, l.Buyers, l.Returned, l.LastOrderID,
				want, []int64{id(3), id(4)}, id(9))
		}
	}
}

func testNextDeadline(t *testing.T, s seckill.Store) {
	ctx := context.Background()
	next := func() (time.Time, bool) {
		t.Helper()
		d, ok, err := s.NextDeadline(ctx)
		if err != nil {
			t.Fatalf("NextDeadline: %v", err)
		}
		return d, ok
	}
	if d, ok := next(); ok {
		t.Errorf("NextDeadline with no orders = %v, want none", d)
	}
	none := newSale(t, s, 10, 0, true)
	confirm(t, s, none, 1)
	if d, ok := next(); ok {
		t.Errorf("NextDeadline with orders without deadline = %v, want none", d)
	}
	later := newSale(t, s, 10, 2*window, true)
	sooner := newSale(t, s, 10, window, true)
	os := confirm(t, s, later, 2)
	os = append(os, confirm(t, s, sooner, 3)...)
	tick()
	os = append(os, confirm(t, s, sooner, 4)...)
	if d, ok := next(); !ok || !d.Equal(os[1].PayBy) || d.Location() != time.UTC {
		t.Errorf("NextDeadline = %v %v, want order 3's %v", d, ok, os[1].PayBy)
	}
	if _, err := pay(s, 3, 3, "", time.Now()); err != nil {
		t.Fatal(err)
	}
	if d, _ := next(); !d.Equal(os[2].PayBy) {
		t.Errorf("NextDeadline after paying 3 = %v, want order 4's %v", d, os[2].PayBy)
	}
	if _, _, err := s.Cancel(ctx, 4, 4, time.Now()); err != nil {
		t.Fatal(err)
	}
	if d, _ := next(); !d.Equal(os[0].PayBy) {
		t.Errorf("NextDeadline after cancelling 4 = %v, want order 2's %v", d, os[0].PayBy)
	}
	if _, err := s.Expire(ctx, seckill.Fence{Name: "e", Token: 1}, os[0].PayBy, 10); err != nil {
		t.Fatal(err)
	}
	if d, ok := next(); ok {
		t.Errorf("NextDeadline after the last expired = %v, want none", d)
	}
}

// testPendingReturns: the outbox of returns whose Redis half is not done,
// oldest first, until Restocked records them.
func testPendingReturns(t *testing.T, s seckill.Store) {
	ctx := context.Background()
	a := newSale(t, s, 10, window, true)
	b := newSale(t, s, 10, window, false)
	confirm(t, s, a, 1, 2)
	os := confirm(t, s, b, 3)
	now := time.Now().Truncate(time.Millisecond).UTC()
	if _, _, err := s.Cancel(ctx, 2, 2, now); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Cancel(ctx, 1, 1, now.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Expire(ctx, seckill.Fence{Name: "e", Token: 1}, os[0].PayBy, 10); err != nil {
		t.Fatal(err)
	}
	r := func(id int64, act seckill.Activity, st seckill.OrderStatus, at time.Time) seckill.Return {
		return seckill.Return{OrderID: id, ActivityID: act.ID, UserID: id, Status: st, Rebuy: act.Rebuy, Buckets: act.Buckets, ReturnedAt: at}
	}
	all := []seckill.Return{
		r(2, a, seckill.OrderCancelled, now), r(1, a, seckill.OrderCancelled, now.Add(time.Second)), r(3, b, seckill.OrderExpired, os[0].PayBy),
	}
	checkPending(t, s, all...)
	got, err := s.PendingReturns(ctx, 2)
	if err != nil || !slices.Equal(got, all[:2]) {
		t.Errorf("PendingReturns(2) = %+v, %v; want %+v", got, err, all[:2])
	}
	if err := s.Restocked(ctx, []int64{2, 99}); err != nil {
		t.Fatalf("Restocked: %v", err)
	}
	checkPending(t, s, all[1:]...)
	if err := s.Restocked(ctx, []int64{2, 1, 3}); err != nil {
		t.Fatalf("Restocked: %v", err)
	}
	checkPending(t, s)
	if err := s.Restocked(ctx, nil); err != nil {
		t.Errorf("Restocked(nil): %v", err)
	}
	for _, limit := range []int{0, -1, 100_000} {
		_, err := s.PendingReturns(ctx, limit)
		wantCode(t, fmt.Sprintf("PendingReturns(%d)", limit), err, seckill.EINVALID)
	}
}

// checkPending checks the whole outbox.
func checkPending(t testing.TB, s seckill.Store, want ...seckill.Return) {
	t.Helper()
	got, err := s.PendingReturns(context.Background(), 500)
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("PendingReturns = %+v, %v;\nwant %+v", got, err, want)
	}
}

// testUserOrders: a user's orders and failures, every state, newest first,
// page by page.
func testUserOrders(t *testing.T, s seckill.Store) {
	ctx := context.Background()
	const user = 1 << 40
	var acts []seckill.Activity
	for range 3 {
		acts = append(acts, newSale(t, s, 10, window, true))
	}
	at := func(ms int) time.Time { return created.Add(time.Duration(ms) * time.Millisecond) }
	r := func(id int64, a seckill.Activity, uid int64, ms int) seckill.OrderRequest {
		return seckill.OrderRequest{OrderID: id, ActivityID: a.ID, UserID: uid, CreatedAt: at(ms)}
	}
	// Orders 10..15 of the user (two created in the same millisecond), and
	// others' orders around them.
	checkApply(t, s, []seckill.OrderRequest{
		r(10, acts[0], user, 1), r(11, acts[1], user, 5), r(12, acts[2], user, 5), r(13, acts[0], user, 7),
		r(20, acts[0], 7, 6), r(21, acts[1], 8, 9),
	}, confirmed, confirmed, confirmed, duplicate(10), confirmed, confirmed)
	checkFail(t, s, []seckill.OrderRequest{r(14, acts[1], user, 3), r(15, acts[0], user, 9)}, seckill.ReasonPoison,
		failed(seckill.ReasonPoison), failed(seckill.ReasonPoison))
	if _, err := pay(s, 11, user, "k", time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Cancel(ctx, 12, user, time.Now()); err != nil {
		t.Fatal(err)
	}
	want := []int64{15, 13, 12, 11, 14, 10}
	for _, limit := range []int{1, 2, 4, 6, 100} {
		var got []int64
		var cursor seckill.Cursor
		for page := 0; ; page++ {
			os, err := s.UserOrders(ctx, user, cursor, limit)
			if err != nil {
				t.Fatalf("UserOrders: %v", err)
			}
			if len(os) > limit || page > 10 {
				t.Fatalf("page %d of limit %d holds %d orders", page, limit, len(os))
			}
			for _, o := range os {
				got = append(got, o.ID)
				if stored := order(t, s, o.ID); o != stored {
					t.Errorf("UserOrders gave %+v, Order gives %+v", o, stored)
				}
			}
			if len(os) < limit {
				break
			}
			cursor = seckill.Cursor{CreatedAt: os[len(os)-1].CreatedAt, OrderID: os[len(os)-1].ID}
		}
		if !slices.Equal(got, want) {
			t.Errorf("UserOrders by pages of %d = %v, want %v", limit, got, want)
		}
	}
	if os, err := s.UserOrders(ctx, 999, seckill.Cursor{}, 10); err != nil || len(os) != 0 {
		t.Errorf("UserOrders(user without orders) = %v, %v", os, err)
	}
	for _, limit := range []int{0, -1, 100_000} {
		_, err := s.UserOrders(ctx, user, seckill.Cursor{}, limit)
		wantCode(t, fmt.Sprintf("UserOrders(limit %d)", limit), err, seckill.EINVALID)
	}
}

func testStateCounts(t *testing.T, s seckill.Store) {
	a := newSale(t, s, 3, window, true)
	checkCounts(t, s, a.ID, seckill.StateCounts{})
	checkApply(t, s, []seckill.OrderRequest{req(1, a.ID, 1), req(2, a.ID, 1), req(3, a.ID, 3), req(4, a.ID, 4), req(5, a.ID, 5)},
		confirmed, duplicate(1), confirmed, confirmed, soldOut)
	if _, err := pay(s, 1, 1, "", time.Now()); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, s, a.ID, seckill.StateCounts{seckill.OrderPaid: 1, seckill.OrderConfirmed: 2, seckill.OrderFailed: 2})
	checkCounts(t, s, a.ID+100, seckill.StateCounts{})
}

// Upgrade is how RunUpgrade reaches an engine's database.
type Upgrade struct {
	// OpenAt opens the database migrated up to version only, as an older
	// seckill left it.
	OpenAt func(version string) (seckill.Store, error)
	// Exec runs a statement with ? placeholders on the tables of old, a
	// store OpenAt returned; time arguments are stored as the engine
	// stores times.
	Exec func(old seckill.Store, q string, args ...any) error
	// Open opens the database with the store, which migrates it.
	Open func() seckill.Store
}

// RunUpgrade checks that a database at migration 0001 (before the order
// lifecycle) that holds orders upgrades in place: its activities have no
// payment step and rebuy, its orders are confirmed without a deadline, the
// duplicate guard still holds, and the lifecycle works on them.
func RunUpgrade(t *testing.T, db Upgrade) {
	ctx := context.Background()
	old, err := db.OpenAt("0001_init")
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	exec := func(q string, args ...any) {
		t.Helper()
		if err := db.Exec(old, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	starts := time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC)
	exec(`INSERT INTO activities (name, stock, remaining, starts_at, ends_at) VALUES ('old', 3, 1, ?, ?)`, starts, starts.Add(time.Hour))
	exec(`INSERT INTO orders (id, activity_id, user_id, status, created_at) VALUES (11, 1, 1, 'confirmed', ?), (12, 1, 2, 'confirmed', ?)`,
		created, created.Add(time.Millisecond))
	exec(`INSERT INTO order_failures (order_id, activity_id, user_id, reason, existing_order_id, created_at) VALUES (13, 1, 1, 'duplicate', 11, ?)`,
		created.Add(2*time.Millisecond))

	// The first activity of a fresh database has id 1 in every engine.
	s := db.Open()
	a, err := s.Activity(ctx, 1)
	if err != nil || a.PayWithin != 0 || !a.Rebuy || a.Remaining != 1 {
		t.Fatalf("upgraded activity = %+v, %v; want no payment step, rebuy, remaining 1", a, err)
	}
	o := order(t, s, 11)
	if want := (seckill.Order{ID: 11, ActivityID: 1, UserID: 1, Status: seckill.OrderConfirmed, CreatedAt: created}); o != want {
		t.Errorf("upgraded order = %+v, want %+v", o, want)
	}
	l, err := s.Load(ctx, 1)
	if err != nil || !slices.Equal(l.Buyers, []seckill.Buyer{{UserID: 1, OrderID: 11}, {UserID: 2, OrderID: 12}}) || len(l.Returned) != 0 || l.LastOrderID != 0 {
		t.Errorf("Load = %+v, %v", l, err) // ids 11..13 lie in no activity's range: LastOrderID 0
	}
	checkOrder(t, s, 13, seckill.OrderFailed, seckill.ReasonDuplicate)
	checkApply(t, s, []seckill.OrderRequest{req(14, 1, 2), req(15, 1, 5)}, duplicate(12), confirmed)
	if o := order(t, s, 15); !o.PayBy.IsZero() {
		t.Errorf("new order of an upgraded activity: PayBy %v, want none", o.PayBy)
	}
	_, err = pay(s, 11, 1, "", time.Now())
	wantCode(t, "Pay in an upgraded activity", err, seckill.ENOTPAYABLE)
	if _, _, err := s.Cancel(ctx, 11, 1, time.Now()); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	checkApply(t, s, []seckill.OrderRequest{req(16, 1, 1)}, confirmed) // rebuy
	checkCounts(t, s, 1, seckill.StateCounts{seckill.OrderConfirmed: 3, seckill.OrderCancelled: 1, seckill.OrderFailed: 2})
	os, err := s.UserOrders(ctx, 1, seckill.Cursor{}, 10)
	if err != nil || len(os) != 3 || os[0].ID != 16 || os[1].ID != 13 || os[2].ID != 11 {
		t.Errorf("UserOrders = %+v, %v; want 16, 13, 11", os, err)
	}
}

// IndexedQuery is a query of expiry or of the returns outbox, which must
// read one index range whatever the number of orders: each engine's test
// shows its plan.
type IndexedQuery struct {
	Query string // with ? placeholders
	Args  []any
	Index string // the index it must read
}

// IndexedQueries lists them; due is a deadline argument, as the engine
// takes times.
func IndexedQueries(due any) []IndexedQuery {
	return []IndexedQuery{
		{sqlstore.NextDeadlineQuery, nil, "orders_pay_by_idx"},
		{sqlstore.DueQuery, []any{due, 100}, "orders_pay_by_idx"},
		{sqlstore.PendingReturnsQuery, []any{100}, "order_returns_pending_idx"},
	}
}
