// Package goredis adapts go-redis v9 clients to lock.Redis: the standalone
// client, the Sentinel failover clients and the Cluster client.
//
// go-redis ignores context deadlines unless the client is made with
// ContextTimeoutEnabled: its ReadTimeout (3 s by default) bounds a call to a
// hung server instead. The lock does not depend on it (a lease timer, not
// the renewal call, declares a lock lost), but Redlock's per-node timeouts
// do: give Redlock nodes ContextTimeoutEnabled: true.
package goredis

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill/lock"
)

// healthCheck is how long the subscription may stay silent before a PING
// must prove the connection alive.
const healthCheck = 10 * time.Second

type client struct {
	c redis.UniversalClient
}

var _ lock.Redis = client{}

// New returns c as a lock.Redis. The lock does not close c.
func New(c redis.UniversalClient) lock.Redis { return client{c} }

func (r client) eval(ctx context.Context, cmd, script string, keys, args []string) (int64, error) {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, cmd, script, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	for _, v := range args {
		a = append(a, v)
	}
	c := redis.NewIntCmd(ctx, a...)
	_ = r.c.Process(ctx, c)
	return c.Result()
}

func (r client) EvalSHA(ctx context.Context, sha1 string, keys, args []string) (int64, error) {
	return r.eval(ctx, "evalsha", sha1, keys, args)
}

func (r client) Eval(ctx context.Context, script string, keys, args []string) (int64, error) {
	return r.eval(ctx, "eval", script, keys, args)
}

func (r client) PSubscribe(ctx context.Context, pattern string, ready func(), message func(channel string)) error {
	ps := r.c.PSubscribe(ctx, pattern)
	defer ps.Close()
	// a blocked read does not watch ctx: closing the connection ends it
	stop := context.AfterFunc(ctx, func() { ps.Close() })
	defer stop()
	pinged := false
	for {
		msg, err := ps.ReceiveTimeout(ctx, healthCheck)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && !pinged {
				pinged = true
				if err := ps.Ping(ctx); err != nil {
					return err
				}
				continue
			}
			return err
		}
		pinged = false
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "psubscribe" {
				ready()
			}
		case *redis.Message:
			message(m.Channel)
		}
	}
}
