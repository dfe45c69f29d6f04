package stock

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill"
)

var (
	//go:embed scripts/retire.lua
	retireSrc    string
	retireScript = redis.NewScript(retireSrc)
)

// Retire deletes every key of activity a from Redis (every bucket's) if it
// ended at least retain ago (by Redis' clock) and every order of its
// streams was written and acknowledged; it reports whether the keys are
// gone. The database answers for the activity from then on: grabs get
// "ended" without Redis, orders are read from the database.
func (e *Engine) Retire(ctx context.Context, a seckill.Activity, retain time.Duration) (bool, error) {
	st, err := e.Stats(ctx, a)
	if err != nil {
		return false, err
	}
	if st.Backlog() > 0 {
		return false, nil
	}
	gone := true
	for _, k := range e.layout(&a).keys {
		n, err := retireScript.Run(ctx, e.rdb, []string{k.Meta, k.Buyers, k.Orders, k.Debt, k.Returned, k.Journal, k.Credits, k.legacyStock},
			Group, a.EndsAt.UnixMilli(), retain.Milliseconds()).Int()
		if err != nil {
			return false, fmt.Errorf("stock: retire activity %d: %w", a.ID, err)
		}
		gone = gone && n == 1
	}
	if gone && len(e.layout(&a).keys) > 1 {
		if err := e.rdb.Del(ctx, KeysFor(e.cfg.Prefix, a.ID).Layout).Err(); err != nil {
			return false, fmt.Errorf("stock: retire activity %d: %w", a.ID, err)
		}
	}
	return gone, nil
}
