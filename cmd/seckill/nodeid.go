package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/seckilldev/seckill/idgen"
	"github.com/seckilldev/seckill/lock"
)

// nodeLease is how long a node id lease lasts without renewal; the lock's
// watchdog renews it every third of that.
const nodeLease = 15 * time.Second

// leaseNodeID takes a free snowflake node id with a lock per id, and keeps
// it: the lock's watchdog renews the lease, the generator refuses ids past
// the lease's known validity (a paused process resumes refusing), and a
// lost lease is replaced by another free node id. stop releases it.
func leaseNodeID(ctx context.Context, lc *lock.Client, prefix string, log *slog.Logger) (*idgen.Generator, func(), error) {
	g := idgen.NewLeased()
	l, node, err := takeNode(ctx, lc, prefix)
	if err != nil {
		return nil, nil, err
	}
	g.SetLease(node, l.ValidUntil())
	log.Info("order id node leased", "node", node)
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				uctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				_ = l.Unlock(uctx)
				cancel()
				return
			case <-tick.C:
				g.SetLease(node, l.ValidUntil())
			case <-l.Done():
				g.SetLease(node, time.Time{})
				log.Warn("order id node lease lost; taking another", "node", node, "cause", context.Cause(l.Context()))
				for ctx.Err() == nil {
					if l, node, err = takeNode(ctx, lc, prefix); err == nil {
						g.SetLease(node, l.ValidUntil())
						log.Info("order id node leased", "node", node)
						break
					}
					log.Warn("take an order id node", "err", err)
					select {
					case <-ctx.Done():
					case <-time.After(time.Second):
					}
				}
				if ctx.Err() != nil {
					return
				}
			}
		}
	}()
	return g, func() { cancel(); <-done }, nil
}

// takeNode locks the first free node id from a random start.
func takeNode(ctx context.Context, lc *lock.Client, prefix string) (*lock.Lock, int64, error) {
	start := rand.Int64N(idgen.MaxNode + 1)
	for i := range int64(idgen.MaxNode + 1) {
		node := (start + i) % (idgen.MaxNode + 1)
		l, err := lc.TryLock(ctx, prefix+":node:"+strconv.FormatInt(node, 10), lock.WithWatchdog(nodeLease))
		if errors.Is(err, lock.ErrNotObtained) {
			continue
		}
		if err != nil {
			return nil, 0, fmt.Errorf("lease an order id node: %w", err)
		}
		return l, node, nil
	}
	return nil, 0, errors.New("lease an order id node: all 1024 node ids are held")
}

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
