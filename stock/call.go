package stock

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill"
)

// noRetry is a command that go-redis must not send twice: a grab whose
// reply was lost may have run, and the engine decides what to do (see
// classify). A struct of one pointer, it goes into an interface without
// allocating.
type noRetry struct{ *redis.Cmd }

func (noRetry) NoRetry() bool { return true }

// grabCall builds the arguments of grab.lua calls of one activity: EVALSHA
// sha 3G keys... channel ack n, then each group's bucket, wake-up message,
// count and uids (see the script). A combiner goroutine keeps one, which
// boxes each bucket's keys and strings once, on first use, not once per
// call.
type grabCall struct {
	s     *shards
	args  []any
	head  [3]any   // channel, ack, n
	keys  [][3]any // by bucket: meta, buyers, orders (nil: not yet)
	group [][2]any // by bucket: b, wake-up message
}

func (e *Engine) newGrabCall(s *shards) *grabCall {
	ack := "0"
	if e.cfg.AckReplicas > 0 {
		ack = "1"
	}
	n := len(s.keys)
	return &grabCall{s: s, args: make([]any, 0, 3+8+e.cfg.MaxBatch),
		head: [3]any{e.WakeChannel(), ack, strconv.Itoa(n)}, keys: make([][3]any, n), group: make([][2]any, n)}
}

// build returns the arguments of one call for the groups, each the grabs
// of one bucket (a group of no grab: the call rewrites the bucket's meta,
// see barrier). The result is valid until the next build.
func (g *grabCall) build(groups [][]*grabReq, buckets []int) []any {
	a := append(g.args[:0], "evalsha", grabScript.Hash(), 3*len(buckets))
	for _, b := range buckets {
		if g.keys[b][0] == nil {
			k := g.s.keys[b]
			g.keys[b] = [3]any{k.Meta, k.Buyers, k.Orders}
			g.group[b] = [2]any{strconv.Itoa(b), WakeMessage(g.s.id, len(g.s.keys), b)}
		}
		a = append(a, g.keys[b][:]...)
	}
	a = append(a, g.head[:]...)
	for i, b := range buckets {
		a = append(a, g.group[b][0], g.group[b][1], strconv.Itoa(len(groups[i])))
		for _, r := range groups[i] {
			a = append(a, strconv.FormatInt(r.uid, 10))
		}
	}
	g.args = a
	return a
}

// WakeMessage is what grab.lua publishes on WakeChannel when it wakes the
// workers for bucket b of an activity of n buckets: the activity id, and
// "/<b>" if n > 1. ParseWake reads it.
func WakeMessage(activityID int64, n, b int) string {
	s := strconv.FormatInt(activityID, 10)
	if n > 1 {
		s += "/" + strconv.Itoa(b)
	}
	return s
}

// ParseWake returns the activity and bucket of a WakeMessage.
func ParseWake(msg string) (activityID int64, b int, err error) {
	id, bucket, several := strings.Cut(msg, "/")
	if activityID, err = strconv.ParseInt(id, 10, 64); err != nil {
		return 0, 0, fmt.Errorf("stock: bad wake-up message %q", msg)
	}
	if several {
		if b, err = strconv.Atoi(bucket); err != nil || b < 0 || b >= seckill.MaxBuckets {
			return 0, 0, fmt.Errorf("stock: bad wake-up message %q", msg)
		}
	}
	return activityID, b, nil
}

// callGrab runs grab.lua once with args (see grabCall),
// sending EVAL if the server does not hold the script. With AckReplicas it
// sends WAIT after the script on the same connection, and unconfirmed is
// the reason the replicas did not confirm it (nil if they did). args[0:2]
// are changed during the call and restored.
func (e *Engine) callGrab(ctx context.Context, args []any) (reply any, unconfirmed, err error) {
	reply, unconfirmed, err = e.sendGrab(ctx, args)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		// A promoted replica or a restarted server has no script cache.
		args[0], args[1] = "eval", grabSrc
		reply, unconfirmed, err = e.sendGrab(ctx, args)
		args[0], args[1] = "evalsha", grabScript.Hash()
	}
	e.reload.after(err)
	return reply, unconfirmed, err
}

func (e *Engine) sendGrab(ctx context.Context, args []any) (any, error, error) {
	cmd := redis.NewCmd(ctx, args...)
	if e.cfg.AckReplicas == 0 {
		err := e.rdb.Process(ctx, noRetry{cmd})
		return cmd.Val(), nil, err
	}
	// WAIT counts the replicas that acknowledged the writes of its own
	// connection: it must follow the script on the connection of the
	// master that ran it. A plain client's pipeline is one connection; a
	// cluster client would split it by node, so the pipeline goes to the
	// node that holds the activity's slot.
	c, err := e.master(ctx, args[3].(string))
	if err != nil {
		// Nothing was sent.
		_, isCluster := e.rdb.(*redis.ClusterClient)
		return nil, nil, &grabError{outcome: ErrUnavailable, err: err, retry: isCluster}
	}
	pipe := c.Pipeline()
	_ = pipe.Process(ctx, noRetry{cmd})
	wait := redis.NewIntCmd(ctx, "wait", e.cfg.AckReplicas, e.cfg.AckTimeout.Milliseconds())
	_ = pipe.Process(ctx, wait)
	_, _ = pipe.Exec(ctx)
	// A MOVED or ASK reply means the script did not run here: it is not
	// followed (the grab is refused, and the caller sends it again after
	// the slot map's reload that callGrab asks for).
	if err := cmd.Err(); err != nil {
		return nil, nil, err
	}
	n, err := wait.Result()
	switch {
	case err != nil:
		return cmd.Val(), fmt.Errorf("WAIT: %w", err), nil
	case n < int64(e.cfg.AckReplicas):
		return cmd.Val(), fmt.Errorf("%d of %d replicas confirmed the grab within %s", n, e.cfg.AckReplicas, e.cfg.AckTimeout), nil
	}
	return cmd.Val(), nil, nil
}

// barrier returns once AckReplicas replicas hold every write of bucket b
// of the activity made before it (a grab.lua call without uids rewrites
// meta, and WAIT follows), or an error wrapping ErrOutcomeUnknown if they
// do not confirm it in time.
func (e *Engine) barrier(ctx context.Context, s *shards, b int) error {
	_, unconfirmed, err := e.callGrab(ctx, e.newGrabCall(s).build([][]*grabReq{nil}, []int{b}))
	switch {
	case err != nil:
		return classify(err)
	case unconfirmed != nil:
		return ackedOutcome(unconfirmed)
	}
	return nil
}

// ackedOutcome is the error of the grabs of a batch whose script ran but
// whose replicas did not confirm it: those it answered with an order.
func ackedOutcome(unconfirmed error) error {
	return &grabError{outcome: ErrOutcomeUnknown, err: unconfirmed}
}

// minAckTimeout keeps WAIT's timeout above 0, which would wait forever.
const minAckTimeout = time.Millisecond
