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
