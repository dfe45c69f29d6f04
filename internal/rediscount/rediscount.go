// Package rediscount counts the commands a go-redis client sends, for tests
// that show the work of an operation is bounded (pipelined commands count
// one each; pub/sub does not go through hooks).
package rediscount

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Counter is a redis.Hook: add it to a client with AddHook.
type Counter struct{ n atomic.Int64 }

var _ redis.Hook = (*Counter)(nil)

// N returns the commands sent so far.
func (c *Counter) N() int64 { return c.n.Load() }

func (c *Counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *Counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c *Counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}
