package main

import (
	"context"
	"fmt"
	"time"

	"github.com/seckilldev/seckill/lock"
)

// serializer runs warm-ups of one activity one instance at a time, with the
// lock library; the work gets the lock's context, so it stops if the lock is
// lost.
func serializer(lc *lock.Client) func(ctx context.Context, key string, fn func(ctx context.Context) error) error {
	return func(ctx context.Context, key string, fn func(ctx context.Context) error) error {
		l, err := lc.Lock(ctx, key, lock.WithWatchdog(10*time.Second))
		if err != nil {
			return fmt.Errorf("lock %s: %w", key, err)
		}
		defer func() {
			uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			_ = l.Unlock(uctx)
			cancel()
		}()
		return fn(l.Context())
	}
}
