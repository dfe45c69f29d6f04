// Package rueidislock adapts a rueidis client (standalone, Sentinel or
// Cluster) to lock.Redis. rueidis pipelines concurrent commands on shared
// connections, which makes it the fastest client for the lock.
//
//	locks := lock.New(rueidislock.New(client)) // client: rueidis.Client
//
// A call whose context ends stops waiting for its answer, and the
// connection it shares with other calls lives on: the adapter hands rueidis
// the context without its deadline (see undeadlined). With
// DisableAutoPipelining, rueidis does not watch the context of a call on a
// connection of its pool, and ConnWriteTimeout bounds the call instead; the
// lock does not depend on it (a lease timer, not the renewal call, declares
// a lock lost, and Redlock stops waiting for a node after its own per-node
// timeout).
package rueidislock

import (
	"context"
	"time"

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
	return r.c.Do(undeadlined(ctx), r.c.B().Evalsha().Sha1(sha1).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
}

func (r client) eval(ctx context.Context, script string, keys, args []string) rueidis.RedisResult {
	return r.c.Do(undeadlined(ctx), r.c.B().Eval().Script(script).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
}

// undeadlined hides the deadline of ctx from rueidis, which still sees it
// end. Given a deadline, rueidis may send the command on an idle
// connection by itself (not pipelined) with the deadline set on the
// socket; a reply later than that breaks the connection, and the commands
// of other goroutines queued behind it fail with "context deadline
// exceeded" too. The lock sets short deadlines of its own (a renewal: the
// end of the validity; a cleanup: a part of the lease), so on a loaded
// machine one late renewal made another goroutine's Lock fail at once. A
// command without a deadline goes through rueidis's pipeline, where a
// caller whose context ends stops waiting and the reply is read and
// dropped: the connection lives on. ctx.Err() still tells
// DeadlineExceeded.
func undeadlined(ctx context.Context) context.Context {
	if _, ok := ctx.Deadline(); !ok {
		return ctx
	}
	return noDeadline{ctx}
}

type noDeadline struct{ context.Context }

func (noDeadline) Deadline() (time.Time, bool) { return time.Time{}, false }

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
