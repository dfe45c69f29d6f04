package worker

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/stock"
)

// ackFault fails the worker's acknowledgements while armed, until the
// prober asks about a stream that went away.
type ackFault struct {
	armed  atomic.Bool
	failed atomic.Int64 // acknowledgements failed
}

func (h *ackFault) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *ackFault) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}
func (h *ackFault) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && h.armed.Load() {
			switch cmds[0].Name() {
			case "xack":
				h.failed.Add(1)
				for _, c := range cmds {
					c.SetErr(errInjected)
				}
				return errInjected
			case "xlen": // the batch gave up: the prober looks for the node
				h.armed.Store(false)
			}
		}
		return next(ctx, cmds)
	}
}

// TestCommittedThenLost: the node of a stream fails right after the
// database committed a batch, and comes back without the batch's grabs (a
// replica promoted without its master's last writes): no entry is left to
// write again, so the worker itself must teach the node the committed
// orders (their units and buyers), or Redis counts more stock than the
// database and tells those buyers a second order id. The database does
// not answer whoever else would (the API's resync reads it once, perhaps
// before the commit).
func TestCommittedThenLost(t *testing.T) {
	s := newSales(t, 1, 10, time.Hour)
	a := s.acts[0]
	k := s.api.Keys(a)[0]
	ctx := context.Background()
	rdb := s.api.Client()
	h := &ackFault{}
	s.wClient.AddHook(h)

	// The node's state before the lost grab, restored right after the
	// worker committed it: what the promoted replica holds.
	keys := []string{k.Meta, k.Buyers, k.Orders, k.Debt, k.Returned}
	var snapshot []string
	var lost atomic.Bool
	w := s.worker(Config{Consumer: "w", Poll: time.Hour, ClaimIdle: time.Hour, Discover: 50 * time.Millisecond})
	w.crashAt = func(stage string) bool {
		if stage == "committed" && lost.CompareAndSwap(true, false) {
			for i, key := range keys {
				var err error
				if snapshot[i] == "" {
					err = rdb.Del(ctx, key).Err()
				} else {
					err = rdb.RestoreReplace(ctx, key, 0, snapshot[i]).Err()
				}
				if err != nil {
					t.Error(err)
				}
			}
			h.armed.Store(true)
		}
		return false
	}
	start(t, w)
	grab := func(uid int64) int64 {
		t.Helper()
		r, err := s.api.Grab(ctx, a, uid)
		if err != nil {
			t.Fatal(err)
		}
		return r.OrderID
	}
	first := grab(1)
	testenv.WaitFor(t, "the first order written and acknowledged", func() bool {
		p, err := rdb.XPending(ctx, k.Orders, stock.Group).Result()
		return s.written(t, first) && err == nil && p.Count == 0
	})
	for _, key := range keys {
		d, err := rdb.Dump(ctx, key).Result()
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		snapshot = append(snapshot, d)
	}

	lost.Store(true)
	second := grab(2)
	testenv.WaitFor(t, "the lost grab's order written", func() bool { return s.written(t, second) })
	if lost.Load() {
		t.Fatal("the lost grab's batch was written without the fault")
	}
	local := seckill.OrderLocal(second)
	testenv.WaitFor(t, "redis taught the committed order again", func() bool {
		mark, err := rdb.HGet(ctx, k.Buyers, "2").Result()
		left, err2 := rdb.HGet(ctx, k.Meta, stock.MetaLeft).Int64()
		return err == nil && err2 == nil && mark == strconv.FormatInt(local, 10) && left == 8
	})
	if h.failed.Load() == 0 {
		t.Fatal("no acknowledgement failed: the fault never ran")
	}
	// The sale goes on: the next grab gets an order id of its own.
	third := grab(3)
	if third == second {
		t.Fatalf("the next grab was told the lost grab's order id %d", second)
	}
	testenv.WaitFor(t, "the next order written", func() bool { return s.written(t, third) })
}
