// Package rueidis adapts a rueidis client (standalone, Sentinel or Cluster)
// to lock.Redis. rueidis pipelines concurrent commands on shared
// connections, which makes it the fastest client for the lock.
//
// Its name clashes with the client's package; import it under another:
//
//	import rueidislock "github.com/seckilldev/seckill/lock/rueidis"
package rueidis

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

func (r client) EvalSHA(ctx context.Context, sha1 string, keys, args []string) (int64, error) {
	cmd := r.c.B().Evalsha().Sha1(sha1).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	return r.c.Do(ctx, cmd).AsInt64()
}

func (r client) Eval(ctx context.Context, script string, keys, args []string) (int64, error) {
	cmd := r.c.B().Eval().Script(script).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	return r.c.Do(ctx, cmd).AsInt64()
}

func (r client) PSubscribe(ctx context.Context, pattern string, ready func(), message func(channel string)) error {
	ctx = rueidis.WithOnSubscriptionHook(ctx, func(s rueidis.PubSubSubscription) {
		if s.Kind == "psubscribe" {
			ready()
		}
	})
	return r.c.Receive(ctx, r.c.B().Psubscribe().Pattern(pattern).Build(), func(m rueidis.PubSubMessage) {
		message(m.Channel)
	})
}
