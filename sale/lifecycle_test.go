package sale_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/stock"
)

// TestReturnReopensSoldOut: a sale sold out on three instances, each
// holding the buyers' snapshot (answering sold_out from memory). A buyer
// cancels on A, which gives the unit back to Redis; B, which hears the
// restock message, sells the unit again within a second. A second cancel
// reaches C, which hears no message, within its recheck (a second): the
// sold-out state is dropped on every instance, not only on the one that
// took the cancel.
func TestReturnReopensSoldOut(t *testing.T) {
	s := newSales(t)
	ctx := context.Background()
	a, b, c := s.trio(t)
	act := seckill.Activity{Name: "resale", Stock: 2, StartsAt: time.Now().Add(-time.Minute),
		EndsAt: time.Now().Add(time.Hour), PayWithin: time.Hour, Rebuy: true}
	if err := a.svc.CreateActivity(ctx, &act); err != nil {
		t.Fatal(err)
	}
	var reqs []seckill.OrderRequest
	for uid := int64(1); uid <= 2; uid++ {
		g := a.mustGrab(t, act.ID, uid)
		reqs = append(reqs, seckill.OrderRequest{OrderID: g.OrderID, ActivityID: act.ID, UserID: uid,
			CreatedAt: seckill.OrderTime(act.StartsAt, g.OrderID)})
	}
	if _, err := s.store.ApplyOrders(ctx, reqs); err != nil { // as the worker would
		t.Fatal(err)
	}
	for _, in := range []*instance{a, b, c} {
		if _, err := in.grab(t, act.ID, 100); !errors.Is(err, stock.ErrSoldOut) {
			t.Fatalf("a non-buyer's grab after the sell-out: %v, want sold out", err)
		}
		testenv.WaitFor(t, "buyer snapshot taken", func() bool { return value(in.metrics.Snapshots) == 1 })
	}

	// resold waits until in sells a unit to uid, and returns how long it
	// took; sold_out meanwhile is the snapshot still trusted.
	resold := func(in *instance, uid int64) time.Duration {
		t.Helper()
		return testenv.WaitFor(t, "the returned unit sold again", func() bool {
			g, err := in.grab(t, act.ID, uid)
			switch {
			case errors.Is(err, stock.ErrSoldOut):
				return false
			case err != nil || !g.New:
				t.Fatalf("user %d after the return: %+v %v, want a new order", uid, g, err)
			}
			return true
		})
	}

	if o, err := a.svc.Cancel(ctx, reqs[0].OrderID, 1); err != nil || o.Status != seckill.OrderCancelled {
		t.Fatalf("cancel: %+v %v", o, err)
	}
	tookB := resold(b, 200)
	if o, err := a.svc.Cancel(ctx, reqs[1].OrderID, 2); err != nil || o.Status != seckill.OrderCancelled {
		t.Fatalf("cancel: %+v %v", o, err)
	}
	tookC := resold(c, 300)
	t.Logf("the returned unit was sold again by B (restock message) %v and by C (recheck) %v after the cancel",
		tookB.Round(time.Millisecond), tookC.Round(time.Millisecond))
	// B trusts its snapshot for an hour: only the restock message can have
	// reopened it. C hears no message: only its 1s recheck can have. The
	// bounds tell either from a wait for something else (the 30s buyer
	// memo, a missed wake-up); the slack is for a loaded machine under
	// -race, not a speed bound (the times are logged above).
	if tookB > 5*time.Second {
		t.Errorf("B sold the returned unit %v after the cancel, want at once (the restock message)", tookB)
	}
	if tookC > 5*time.Second {
		t.Errorf("C sold the returned unit %v after the cancel, want within its 1s recheck", tookC)
	}
	if _, err := a.grab(t, act.ID, 400); !errors.Is(err, stock.ErrSoldOut) {
		t.Errorf("a grab once both returned units were sold again: %v, want sold out", err)
	}
}
