// Package rueidislock adapts a rueidis client (standalone, Sentinel or
// Cluster) to lock.Redis. rueidis pipelines concurrent commands on shared
// connections, which makes it the fastest client for the lock.
//
//	locks := lock.New(rueidislock.New(client)) // client: rueidis.Client
package rueidislock

import (
	"context"

	"github.com/redis/rueidis"

	"github.com/seckilldev/seckill/lock"
)

type client struct {
	c rueidis.Client
}

var _ lock.Redis = client{}

// New returns c as a lock.Redis. The lock does not close c.
func New(c rueidis.Client) lock.Redis { return client{c} }

func (r client) evalSHA(ctx context.Context, sha1 string, keys, args []string) rueidis.RedisResult {
	return r.c.Do(ctx, r.c.B().Evalsha().Sha1(sha1).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
}

func (r client) eval(ctx context.Context, script string, keys, args []string) rueidis.RedisResult {
	return r.c.Do(ctx, r.c.B().Eval().Script(script).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
}

func (r client) EvalSHA(ctx context.Context, sha1 string, keys, args []string) (int64, error) {
	return r.evalSHA(ctx, sha1, keys, args).AsInt64()
}

func (r client) Eval(ctx context.Context, script string, keys, args []string) (int64, error) {
	return r.eval(ctx, script, keys, args).AsInt64()
}

func (r client) EvalSHAStrings(ctx context.Context, sha1 string, keys, args []string) ([]string, error) {
	return r.evalSHA(ctx, sha1, keys, args).AsStrSlice()
}

func (r client) EvalStrings(ctx context.Context, script string, keys, args []string) ([]string, error) {
	return r.eval(ctx, script, keys, args).AsStrSlice()
}

func (r client) Subscribe(ctx context.Context, channel string, ready func(), message func(payload string)) error {
	ctx = rueidis.WithOnSubscriptionHook(ctx, func(s rueidis.PubSubSubscription) {
		if s.Kind == "subscribe" {
			ready()
		}
	})
	return r.c.Receive(ctx, r.c.B().Subscribe().Channel(channel).Build(), func(m rueidis.PubSubMessage) {
		message(m.Message)
	})
}
