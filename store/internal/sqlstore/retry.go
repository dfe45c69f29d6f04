package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
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
