package stock

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill"
)

// What a grab that got no answer from Redis tells its caller: whether it
// surely did not happen, or may have.
var (
	// ErrUnavailable: the grab surely did not run (it was refused before it
	// was sent, or Redis answered an error it gives before running a
	// script); nothing was taken.
	ErrUnavailable = seckill.Errorf(seckill.EUNAVAILABLE, "the sale cannot be reached right now; nothing was taken")
	// ErrOutcomeUnknown: the grab was sent and may have run (no reply in
	// time, or its replicas did not confirm it). The user's next grab
	// tells: it answers the order if the grab took one.
	ErrOutcomeUnknown = seckill.Errorf(seckill.EOUTCOMEUNKNOWN, "the grab may or may not have taken a unit; grab again to learn which (a grab that took one answers its order)")
)

// grabError is a grab call that failed, with what is known of its outcome.
// One value answers every grab of the batch.
type grabError struct {
	outcome *seckill.Error // ErrUnavailable or ErrOutcomeUnknown
	err     error
	// retry: the grab surely did not run and may be sent again (a closed
	// engine's refusal may not).
	retry bool
}

func (e *grabError) Error() string   { return "stock: grab: " + e.err.Error() }
func (e *grabError) Unwrap() []error { return []error{e.outcome, e.err} }

var errClosed = &grabError{outcome: ErrUnavailable, err: errors.New("engine closed")}

// classify makes the error of a grab call a *grabError.
func classify(err error) *grabError {
	if ge, ok := errors.AsType[*grabError](err); ok {
		return ge
	}
	if notRun(err) {
		return &grabError{outcome: ErrUnavailable, err: err, retry: true}
	}
	return &grabError{outcome: ErrOutcomeUnknown, err: err}
}

// refusals are the error replies Redis gives before a script runs, or
// before its first write (grab.lua reads before it writes): a grab
// answered one of them took nothing.
var refusals = []string{
	"MOVED ", "ASK ", "CLUSTERDOWN ", "TRYAGAIN ", "LOADING ", "READONLY ", "MASTERDOWN ",
	"NOREPLICAS ", "NOSCRIPT ", "OOM ", "BUSY ", "NOAUTH ", "WRONGPASS ", "NOPERM ",
	"max number of clients reached",
}

// notRun reports whether err proves that the command did not run: it
// never left this process (no connection: a dial error, a pool timeout,
// a closed client), or Redis refused it. Any other error (a read timeout,
// EOF, a reset connection after the command was written) leaves the
// outcome unknown.
func notRun(err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, redis.ErrPoolExhausted), errors.Is(err, redis.ErrClosed):
		return true
	}
	if op, ok := errors.AsType[*net.OpError](err); ok && op.Op == "dial" {
		return true
	}
	if _, ok := errors.AsType[redis.Error](err); ok {
		for _, p := range refusals {
			if redis.HasErrorPrefix(err, p) {
				return true
			}
		}
	}
	return false
}

// movedOrDead reports whether err suggests that the slot map of a Redis
// Cluster is stale: a node that cannot be reached or answers late, or a
// reply that says the slot moved or the cluster is changing.
func movedOrDead(err error) bool {
	if _, ok := errors.AsType[redis.Error](err); !ok {
		return err != nil
	}
	for _, p := range []string{"MOVED ", "ASK ", "CLUSTERDOWN ", "TRYAGAIN ", "READONLY ", "LOADING ", "MASTERDOWN "} {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}

// minReload spaces the slot map reloads that errors ask for: a crowd of
// grabs failing on a dead node asks for one every few hundred
// milliseconds, not thousands.
const minReload = 200 * time.Millisecond

// reloader reloads a Redis Cluster client's slot map when an error shows
// that it may be stale, at most once every minReload: once the replica of
// a dead master is promoted, its slots are served again within about
// minReload, not at go-redis' next periodic reload.
type reloader struct {
	cc   *redis.ClusterClient // nil: not a cluster
	last atomic.Int64         // unix nanoseconds of the last reload asked for
}

func (r *reloader) after(err error) {
	if r.cc == nil || !movedOrDead(err) {
		return
	}
	now, last := time.Now().UnixNano(), r.last.Load()
	if now-last < int64(minReload) || !r.last.CompareAndSwap(last, now) {
		return
	}
	// Asynchronous, and go-redis runs one reload at a time.
	r.cc.ReloadState(context.Background())
}
