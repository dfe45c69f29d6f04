package compare

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/check"
	"github.com/seckilldev/seckill/stock"
	"github.com/seckilldev/seckill/worker"
)

// luaSale is the service's own grab path: each item is an activity of the
// service's tables, loaded into Redis by the stock engine; the engine's
// script takes the unit, marks the buyer and appends the order to the
// activity's stream in one step, and the service's worker writes the
// stream to the orders table while the crowd runs, as `seckill serve` does.
type luaSale struct {
	store  seckill.Store
	engine *stock.Engine
	cancel context.CancelFunc
	done   chan error // the worker's end
}

// itemsOnly shows the worker the sale's activities alone, so that it never
// touches another activity of a shared database.
type itemsOnly struct {
	seckill.Store
	acts []seckill.Activity
}

func (s itemsOnly) Activities(context.Context, time.Time) ([]seckill.Activity, error) {
	return s.acts, nil
}

func (s *Sale) prepareLua(ctx context.Context, units []int64) error {
	b := s.b
	st, err := b.serviceStore(ctx)
	if err != nil {
		return fmt.Errorf("compare: open the service's store: %w", err)
	}
	l := &luaSale{store: st, engine: stock.New(b.rdb, stock.Config{Prefix: b.cfg.Prefix})}
	s.lua = l
	if err := l.engine.Preload(ctx); err != nil {
		return fmt.Errorf("compare: load the grab script: %w", err)
	}
	now := time.Now()
	var acts []seckill.Activity
	for i, n := range units {
		a := seckill.Activity{
			Name:     fmt.Sprintf("seckill bench --compare: lua item %d of %d", i+1, len(units)),
			Stock:    n,
			StartsAt: now.Add(-time.Minute),
			// ends soon after the run, so that no service keeps it live
			EndsAt:  now.Add(b.cfg.Duration + b.cfg.Drain + 5*time.Minute),
			Buckets: b.cfg.Buckets,
		}
		if err := st.CreateActivity(ctx, &a); err != nil {
			return fmt.Errorf("compare: create activity: %w", err)
		}
		if _, err := l.engine.Load(ctx, a, nil); err != nil {
			return err
		}
		s.items = append(s.items, item{id: a.ID, stock: n, act: a})
		acts = append(acts, a)
	}
	w := worker.New(itemsOnly{st, acts}, l.engine,
		// No trimming: the stream is counted after the round.
		worker.Config{Consumer: b.cfg.Prefix + "-worker", Poll: 100 * time.Millisecond, TrimEvery: -1}, b.cfg.Log, nil)
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	l.cancel, l.done = cancel, make(chan error, 1)
	go func() { l.done <- w.Run(wctx) }()
	return nil
}

// close stops the worker, which finishes the batch in hand, and the engine.
func (l *luaSale) close() error {
	var err error
	if l.cancel != nil {
		l.cancel()
		err = <-l.done
		l.cancel = nil
	}
	l.engine.Close()
	return err
}

func (s *Sale) grabLua(ctx context.Context, it *item, uid int64) (reply, error) {
	res, err := s.lua.engine.Grab(ctx, it.act, uid)
	switch {
	case errors.Is(err, stock.ErrSoldOut):
		return reply{}, errSoldOut
	case err != nil:
		return reply{}, err
	}
	return reply{order: res.OrderID, new: res.New}, nil
}

// countLua waits for the worker to write every accepted grab, then counts
// the confirmed orders in the service's orders table. Its unique index
// would hide a second order of a user, so duplicates are counted in Redis:
// the order stream keeps one entry (o=<order> u=<user>) per accepted grab.
func (s *Sale) countLua(ctx context.Context, t *Tally) error {
	b, l := s.b, s.lua
	start := time.Now()
	var drainErr error
	for _, it := range s.items {
		if err := check.WaitDrained(ctx, b.rdb, b.cfg.Prefix, it.id, b.cfg.Drain); err != nil {
			drainErr = err
			break
		}
	}
	drained := time.Since(start)
	if err := l.close(); err != nil {
		return fmt.Errorf("compare: order worker: %w", err)
	}
	if drainErr != nil {
		if ctx.Err() != nil {
			return drainErr
		}
		t.Notes = append(t.Notes, "worker did not drain: "+drainErr.Error())
	}
	var accepted, redisSold int64
	for _, it := range s.items {
		buyers, err := l.store.Buyers(ctx, it.id)
		if err != nil {
			return fmt.Errorf("compare: count orders of activity %d: %w", it.id, err)
		}
		var entries []redis.XMessage
		for _, k := range l.engine.Keys(it.act) { // one stream per bucket
			msgs, err := b.rdb.XRange(ctx, k.Orders, "-", "+").Result()
			if err != nil {
				return fmt.Errorf("compare: read the order stream of activity %d: %w", it.id, err)
			}
			entries = append(entries, msgs...)
		}
		perUser := map[string]int{}
		var acc int64
		for _, e := range entries {
			acc++
			perUser[fmt.Sprint(e.Values["u"])]++
		}
		for _, n := range perUser {
			if n > 1 {
				t.Duplicates++
			}
		}
		left, err := l.engine.Remaining(ctx, it.act)
		if err != nil {
			return fmt.Errorf("compare: read stock of activity %d: %w", it.id, err)
		}
		sold := int64(len(buyers))
		t.Sold += sold
		t.Oversold += max(0, max(sold, acc)-it.stock)
		accepted += acc
		redisSold += it.stock - left
	}
	t.Notes = append(t.Notes, fmt.Sprintf("counted in the service's orders table after its worker drained them (%s after the crowd); redis: %d grabs accepted, %d units taken",
		drained.Round(time.Millisecond), accepted, redisSold))
	if accepted != t.Sold {
		t.Notes = append(t.Notes, strconv.FormatInt(accepted-t.Sold, 10)+" accepted grabs not confirmed in the database")
	}
	return nil
}
