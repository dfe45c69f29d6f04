// Package goredis adapts go-redis v9 clients to lock.Redis: the standalone
// client, the Sentinel failover clients and the Cluster client.
//
//	locks := lock.New(goredis.New(rdb)) // rdb: any redis.UniversalClient
//
// go-redis ignores context deadlines unless the client is made with
// ContextTimeoutEnabled: its ReadTimeout (3 s by default) bounds a call to a
// hung server instead. The lock does not depend on it: a lease timer, not
// the renewal call, declares a lock lost, and Redlock stops waiting for a
// node after its own per-node timeout.
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
	p *pipeliner // nil: each call on its own
}

var _ lock.Redis = client{}

// Option configures the adapter.
type Option func(*client)

// WithoutPipelining sends each call on its own connection, as go-redis
// does, instead of sending the calls of concurrent goroutines together
// (see New).
func WithoutPipelining() Option { return func(r *client) { r.p = nil } }

// New returns c as a lock.Redis. The lock does not close c.
//
// On a single server's client (standalone, or Sentinel's failover client),
// the calls that goroutines make at the same time go together in one
// pipeline, as rueidis does by itself: no delay is added (a call with
// nobody else to wait for goes at once), and a call whose context ends
// stops waiting for its answer. A Cluster or Ring client sends each call on
// its own (a pipeline over several nodes waits for the slowest).
func New(c redis.UniversalClient, opts ...Option) lock.Redis {
	r := client{c: c}
	if rc, ok := c.(*redis.Client); ok {
		r.p = &pipeliner{c: rc}
	}
	for _, o := range opts {
		o(&r)
	}
	return r
}

// process runs cmd; an error means ctx ended before its answer came, and
// cmd must not be read.
func (r client) process(ctx context.Context, cmd redis.Cmder) error {
	if r.p != nil {
		return r.p.process(ctx, cmd)
	}
	_ = r.c.Process(ctx, cmd)
	return nil
}

func evalArgs(cmd, script string, keys, args []string) []any {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, cmd, script, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	for _, v := range args {
		a = append(a, v)
	}
	return a
}

func (r client) evalInt(ctx context.Context, cmd, script string, keys, args []string) (int64, error) {
	c := redis.NewIntCmd(ctx, evalArgs(cmd, script, keys, args)...)
	if err := r.process(ctx, c); err != nil {
		return 0, err
	}
	return c.Result()
}

func (r client) evalStrings(ctx context.Context, cmd, script string, keys, args []string) ([]string, error) {
	c := redis.NewStringSliceCmd(ctx, evalArgs(cmd, script, keys, args)...)
	if err := r.process(ctx, c); err != nil {
		return nil, err
	}
	return c.Result()
}

func (r client) EvalSHA(ctx context.Context, sha1 string, keys, args []string) (int64, error) {
	return r.evalInt(ctx, "evalsha", sha1, keys, args)
}

func (r client) Eval(ctx context.Context, script string, keys, args []string) (int64, error) {
	return r.evalInt(ctx, "eval", script, keys, args)
}

func (r client) EvalSHAStrings(ctx context.Context, sha1 string, keys, args []string) ([]string, error) {
	return r.evalStrings(ctx, "evalsha", sha1, keys, args)
}

func (r client) EvalStrings(ctx context.Context, script string, keys, args []string) ([]string, error) {
	return r.evalStrings(ctx, "eval", script, keys, args)
}

func (r client) Subscribe(ctx context.Context, channel string, ready func(), message func(payload string)) error {
	ps := r.c.Subscribe(ctx, channel)
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
			if m.Kind == "subscribe" {
				ready()
			}
		case *redis.Message:
			message(m.Payload)
		}
	}
}
