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

// Retire deletes every key of activity a from Redis if it ended at least
// retain ago (by Redis' clock) and every order of its stream was written
// and acknowledged; it reports whether the keys are gone. The database
// answers for the activity from then on: grabs get "ended" without Redis,
// orders are read from the database.
func (e *Engine) Retire(ctx context.Context, a seckill.Activity, retain time.Duration) (bool, error) {
	st, err := e.Stats(ctx, a.ID)
	if err != nil {
		return false, err
	}
	if st.Backlog() > 0 {
		return false, nil
	}
	k := e.Keys(a.ID)
	n, err := retireScript.Run(ctx, e.rdb, []string{k.Meta, k.Stock, k.Buyers, k.Orders, k.Debt, k.Awake, k.Returned},
		Group, a.EndsAt.UnixMilli(), retain.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("stock: retire activity %d: %w", a.ID, err)
	}
	return n == 1, nil
}
