package sale_test

import (
	"context"
	"io"
	"log/slog"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/sale"
	"github.com/seckilldev/seckill/stock"
)

// TestGrabOutcomeUnknown: a grab whose replicas do not confirm it is told
// outcome_unknown, not unavailable, and is not remembered as a buyer; the
// user's next grab, once the replica is back, answers the order it took.
// A grab that cannot reach Redis at all is told unavailable.
func TestGrabOutcomeUnknown(t *testing.T) {
	s := newSales(t)
	master, replica := testenv.StartReplicated(t)
	rdb := redis.NewClient(&redis.Options{Addr: master.Addr})
	t.Cleanup(func() { rdb.Close() })
	engine := stock.New(rdb, stock.Config{Prefix: s.prefix, AckReplicas: 1})
	t.Cleanup(engine.Close)
	metrics := sale.NewMetrics(nil)
	svc := sale.New(s.store, engine, sale.Config{}, slog.New(slog.NewTextHandler(io.Discard, nil)), metrics)
	in := &instance{svc: svc, engine: engine, metrics: metrics}
	a := in.create(t, 10)
	in.mustGrab(t, a.ID, 1)

	if err := replica.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = replica.Signal(syscall.SIGCONT) })
	_, err := in.grab(t, a.ID, 2)
	if code := seckill.ErrorCode(err); code != seckill.EOUTCOMEUNKNOWN {
		t.Fatalf("grab with the replica frozen: %v (%s), want %s", err, code, seckill.EOUTCOMEUNKNOWN)
	}
	if n := value(metrics.Grabs.WithLabelValues(seckill.EOUTCOMEUNKNOWN)); n != 1 {
		t.Errorf("grabs counted outcome_unknown: %v, want 1", n)
	}
	if err := replica.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	var g sale.Grabbed
	testenv.WaitFor(t, "user 2's next grab answers", func() bool {
		g, err = in.grab(t, a.ID, 2)
		return err == nil
	})
	if g.New || seckill.OrderActivity(g.OrderID) != a.ID {
		t.Fatalf("user 2's next grab: %+v, want the order of the unknown grab (not new)", g)
	}

	// Redis gone: nothing can have been taken.
	master.Kill()
	_, err = svc.Grab(context.Background(), a.ID, 3)
	if code := seckill.ErrorCode(err); code != seckill.EUNAVAILABLE {
		t.Fatalf("grab with redis down: %v (%s), want %s", err, code, seckill.EUNAVAILABLE)
	}
}

// TestResyncAfterFailure: Redis lost a confirmed order's unit and buyer (as
// a replica promoted without its master's last writes does) while the
// database holds the order; once Redis failed a grab and answers again, the
// service teaches it the order again, so that the buyer is not sold a
// second unit.
func TestResyncAfterFailure(t *testing.T) {
	s := newSales(t)
	srv := testenv.StartRedis(t, "--appendonly", "yes", "--appendfsync", "always")
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rdb.Close() })
	engine := stock.New(rdb, stock.Config{Prefix: s.prefix})
	t.Cleanup(engine.Close)
	metrics := sale.NewMetrics(nil)
	svc := sale.New(s.store, engine, sale.Config{}, slog.New(slog.NewTextHandler(io.Discard, nil)), metrics)
	in := &instance{svc: svc, engine: engine, metrics: metrics}
	a := in.create(t, 10)
	g := in.mustGrab(t, a.ID, 1)
	ctx := context.Background()
	if _, err := s.store.ApplyOrders(ctx, []seckill.OrderRequest{{OrderID: g.OrderID, ActivityID: a.ID, UserID: 1}}); err != nil {
		t.Fatal(err)
	}
	k := engine.Keys(a)[0]
	mark, err := rdb.HGet(ctx, k.Buyers, "1").Result()
	if err != nil {
		t.Fatal(err)
	}
	// Redis loses the order, then fails a grab.
	if err := rdb.HDel(ctx, k.Buyers, "1").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HIncrBy(ctx, k.Meta, stock.MetaLeft, 1).Err(); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	if _, err := in.grab(t, a.ID, 2); seckill.ErrorCode(err) != seckill.EUNAVAILABLE {
		t.Fatalf("grab with redis down: %v, want unavailable", err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "the buyer taught to redis again", func() bool {
		got, err := rdb.HGet(ctx, k.Buyers, "1").Result()
		return err == nil && got == mark
	})
	if left, err := rdb.HGet(ctx, k.Meta, stock.MetaLeft).Int64(); err != nil || left != 9 {
		t.Errorf("stock in redis after the resync: %d (%v), want 9", left, err)
	}
	if n := value(metrics.Resynced); n != 1 {
		t.Errorf("units resynced: %v, want 1", n)
	}
	if g2 := in.mustGrab(t, a.ID, 1); g2.New || g2.OrderID != g.OrderID {
		t.Errorf("the buyer's grab after the resync: %+v, want order %d again", g2, g.OrderID)
	}
}
