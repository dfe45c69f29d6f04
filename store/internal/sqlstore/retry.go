package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/seckilldev/seckill"
)

// MaxAttempts is how often Retry runs a transaction before it gives up.
const MaxAttempts = 6

// ErrConflict reports that a write affected other rows than planned: another
// transaction got in between despite the locks (e.g. the same order id for
// another activity, or a failure recorded for an activity that does not exist
// and so has no row to lock). Rerunning the transaction reads what the other
// one wrote and decides again.
var ErrConflict = errors.New("concurrent write conflict")

// Retry runs tx until it succeeds, fails with an error that retryable rejects,
// ctx ends, or MaxAttempts runs are used up. It waits a short, jittered,
// growing time between runs. tx must be a whole transaction, safe to rerun.
func Retry(ctx context.Context, retryable func(error) bool, tx func() error) error {
	for attempt := 1; ; attempt++ {
		err := tx()
		if err == nil || !(errors.Is(err, ErrConflict) || retryable(err)) {
			return err
		}
		if attempt == MaxAttempts {
			return fmt.Errorf("gave up after %d attempts: %w", attempt, err)
		}
		wait := time.Duration(rand.Int64N(int64(time.Millisecond) << attempt))
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (retrying after: %v)", ctx.Err(), err)
		case <-time.After(wait):
		}
	}
}

// Planner decides the outcomes of a chunk of requests from its facts:
// Apply, or Fail bound to a reason with FailWith.
type Planner func(reqs []seckill.OrderRequest, f *Facts, now time.Time) Plan

// FailWith returns the Planner that records failures with reason.
func FailWith(reason string) Planner {
	return func(reqs []seckill.OrderRequest, f *Facts, now time.Time) Plan {
		return Fail(reqs, reason, f, now)
	}
}

// Batch is the body every engine's ApplyOrders and FailOrders share: in one
// transaction begun by inTx, for each chunk of at most MaxChunk requests,
// read the facts, plan and write; the whole transaction is rerun (Retry)
// while its error is retryable. It returns the outcomes in request order.
func Batch[Tx any](ctx context.Context, reqs []seckill.OrderRequest, retryable func(error) bool,
	inTx func(fn func(Tx) error) error,
	read func(tx Tx, chunk []seckill.OrderRequest) (*Facts, error),
	plan Planner,
	write func(tx Tx, p Plan) error,
) ([]seckill.Outcome, error) {
	out := make([]seckill.Outcome, 0, len(reqs))
	if len(reqs) == 0 {
		return out, nil
	}
	err := Retry(ctx, retryable, func() error {
		out = out[:0]
		return inTx(func(tx Tx) error {
			now := time.Now()
			for chunk := range slices.Chunk(reqs, MaxChunk) {
				f, err := read(tx, chunk)
				if err != nil {
					return err
				}
				p := plan(chunk, f, now)
				if err := write(tx, p); err != nil {
					return err
				}
				out = append(out, p.Outcomes...)
			}
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
