package tests

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seckilldev/seckill/lock"
)

type ctxKey struct{}

// TestDo: fn runs while the mutex is held, with the caller's values, and
// Do returns fn's error and frees the mutex; TryDo does not run fn when
// the mutex is taken; a release still runs when the caller's context has
// ended.
func TestDo(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		ctx := ctxTimeout(t, 60*time.Second)
		c := newClient(t, r, prefix)
		other := newClient(t, r, prefix)
		errFn := errors.New("fn failed")

		t.Run("runs under the hold", func(t *testing.T) {
			vctx := context.WithValue(ctx, ctxKey{}, "v")
			ran := false
			err := c.Do(vctx, "do", func(ctx context.Context) error {
				ran = true
				if held, err := other.IsLocked(ctx, "do"); err != nil || !held {
					t.Errorf("in fn: locked %v (%v)", held, err)
				}
				if ctx.Value(ctxKey{}) != "v" {
					t.Error("fn's context lost the caller's values")
				}
				if ctx.Err() != nil {
					t.Errorf("fn's context ended: %v", context.Cause(ctx))
				}
				return errFn
			})
			if !ran || !errors.Is(err, errFn) || errors.Is(err, lock.ErrLost) {
				t.Errorf("ran %v, Do: %v", ran, err)
			}
			if held, err := other.IsLocked(ctx, "do"); err != nil || held {
				t.Errorf("after Do: locked %v (%v)", held, err)
			}
		})

		t.Run("TryDo", func(t *testing.T) {
			l, err := other.TryLock(ctx, "try-do")
			if err != nil {
				t.Fatal(err)
			}
			ran := false
			err = c.TryDo(ctx, "try-do", func(context.Context) error { ran = true; return nil })
			if ran || !errors.Is(err, lock.ErrNotObtained) {
				t.Errorf("taken: ran %v, TryDo: %v", ran, err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			err = c.TryDo(ctx, "try-do", func(context.Context) error { ran = true; return nil })
			if !ran || err != nil {
				t.Errorf("free: ran %v, TryDo: %v", ran, err)
			}
		})

		t.Run("caller's context ends", func(t *testing.T) {
			cctx, cancel := context.WithCancel(ctx)
			err := c.Do(cctx, "do-cancel", func(ctx context.Context) error {
				cancel()
				<-ctx.Done()
				return ctx.Err()
			})
			if !errors.Is(err, context.Canceled) || errors.Is(err, lock.ErrLost) {
				t.Errorf("Do: %v", err)
			}
			if held, err := other.IsLocked(ctx, "do-cancel"); err != nil || held {
				t.Errorf("after Do: locked %v (%v)", held, err)
			}
		})
	})
}

// TestDoLost: when the hold is lost during fn (ForceUnlock from another
// client), fn's context ends with a cause matching ErrLost once the
// watchdog finds out, and Do's error matches ErrLost, also when fn returned
// nil before anything had noticed (the release finds the lock gone).
func TestDoLost(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		ctx := ctxTimeout(t, 60*time.Second)
		c := newClient(t, r, prefix)
		admin := newClient(t, r, prefix)

		t.Run("noticed", func(t *testing.T) {
			const lease = 300 * time.Millisecond // renewed, and refused, within 100 ms
			var cause error
			err := c.Do(ctx, "lost", func(fctx context.Context) error {
				if _, err := admin.ForceUnlock(ctx, "lost"); err != nil {
					return err
				}
				select {
				case <-fctx.Done():
					cause = context.Cause(fctx)
				case <-time.After(20 * time.Second):
					t.Error("fn's context did not end within 20 s of the loss")
				}
				return nil
			}, lock.WithWatchdog(lease))
			if !errors.Is(cause, lock.ErrLost) {
				t.Errorf("fn's context ended with %v", cause)
			}
			if !errors.Is(err, lock.ErrLost) {
				t.Errorf("Do: %v", err)
			}
		})

		t.Run("unnoticed", func(t *testing.T) {
			ended := false
			err := c.Do(ctx, "lost-quietly", func(fctx context.Context) error {
				if _, err := admin.ForceUnlock(ctx, "lost-quietly"); err != nil {
					return err
				}
				ended = fctx.Err() != nil
				return nil
			}) // the default 30 s lease: no renewal before fn returns
			if ended {
				t.Log("the watchdog noticed before fn returned")
			}
			if !errors.Is(err, lock.ErrLost) {
				t.Errorf("Do: %v", err)
			}
		})

		t.Run("fixed lease ran out", func(t *testing.T) {
			const ttl = 100 * time.Millisecond
			var cause error
			err := c.Do(ctx, "ran-out", func(fctx context.Context) error {
				select {
				case <-fctx.Done():
					cause = context.Cause(fctx)
				case <-time.After(20 * time.Second):
					t.Error("fn's context did not end within 20 s of the lease's end")
				}
				return nil
			}, lock.WithTTL(ttl))
			if !errors.Is(cause, lock.ErrLost) || !errors.Is(err, lock.ErrLost) {
				t.Errorf("fn's context ended with %v; Do: %v", cause, err)
			}
		})
	})
}
