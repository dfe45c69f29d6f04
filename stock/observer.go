package stock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill"
)

// Observation is what Redis held of one activity when it was last read.
type Observation struct {
	At        time.Time
	Loaded    bool  // the remaining stock exists (every bucket's meta holds it)
	Remaining int64 // stock left in Redis, if Loaded (in every bucket)
	// Buckets is the stock left in each bucket of an activity of several,
	// if Loaded (see seckill.Activity.Buckets); nil with one.
	Buckets []int64
	// Seq is the local id of the last order Redis issued (0: none, or not
	// loaded; see seckill.OrderID), the highest of the buckets'.
	Seq int64
	// Stream holds the order stream's figures (zero: no stream).
	Stream StreamStats
}

// Observer reads the activities' state in Redis for the read-only views
// (the /metrics collector, the dashboard) and keeps what it read, so that
// however many scrapers and viewers ask, each activity is read at most
// once per the age they accept: a view that asks again within that age is
// answered from memory, and views asking at once share one read. A read
// costs three pipelined round trips (see StatsOf) whatever the number of
// activities, and 5 commands an activity (GET, HGET, XINFO GROUPS, XLEN,
// XRANGE).
//
// It also keeps the Redis nodes' memory figures (INFO memory), read at
// most once per the age asked.
type Observer struct {
	engine *Engine

	refresh sync.Mutex // held while reading Redis: one read at a time
	mu      sync.Mutex // guards the fields below
	seen    map[int64]Observation
	memory  []NodeMemory
	memAt   time.Time
}

// NodeMemory is a Redis node's memory use (INFO memory).
type NodeMemory struct {
	Addr      string
	Used, Max float64 // used_memory, maxmemory (0: none) in bytes
}

// NewObserver returns an observer of e's activities.
func NewObserver(e *Engine) *Observer {
	return &Observer{engine: e, seen: map[int64]Observation{}}
}

// Observe returns what Redis holds of each activity of as, read at most
// maxAge ago. Activities not read before, or read longer ago, are read now
// (in one batch, shared with a concurrent call that needs them too); the
// others come from memory. Activities whose read failed are missing from
// the map, and the error says why. Observations of activities not asked
// for in a while are forgotten.
func (o *Observer) Observe(ctx context.Context, as []seckill.Activity, maxAge time.Duration) (map[int64]Observation, error) {
	out, stale := o.lookup(as, maxAge, time.Now())
	if len(stale) == 0 {
		return out, nil
	}
	o.refresh.Lock()
	defer o.refresh.Unlock()
	// Another call may have read them while this one waited.
	out, stale = o.lookup(as, maxAge, time.Now())
	if len(stale) == 0 {
		return out, nil
	}
	read, err := o.read(ctx, stale)
	o.mu.Lock()
	defer o.mu.Unlock()
	for id, obs := range read {
		o.seen[id] = obs
		out[id] = obs
	}
	o.forget(time.Now())
	return out, err
}

func (o *Observer) lookup(as []seckill.Activity, maxAge time.Duration, now time.Time) (map[int64]Observation, []seckill.Activity) {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make(map[int64]Observation, len(as))
	var stale []seckill.Activity
	for _, a := range as {
		if obs, ok := o.seen[a.ID]; ok && now.Sub(obs.At) < maxAge {
			out[a.ID] = obs
		} else {
			stale = append(stale, a)
		}
	}
	return out, stale
}

// forgetAfter is how long an observation is kept once read: views ask
// every few seconds at most, so an older one belongs to an activity no
// view shows any more.
const forgetAfter = time.Minute

func (o *Observer) forget(now time.Time) {
	for id, obs := range o.seen {
		if now.Sub(obs.At) > forgetAfter {
			delete(o.seen, id)
		}
	}
}

// read reads the activities' stock, last order and stream figures.
func (o *Observer) read(ctx context.Context, as []seckill.Activity) (map[int64]Observation, error) {
	at := time.Now()
	pipe := o.engine.rdb.Pipeline()
	metas := make([][]*redis.SliceCmd, len(as)) // left and seq of each bucket
	for i := range as {
		for _, k := range o.engine.layout(&as[i]).keys {
			metas[i] = append(metas[i], pipe.HMGet(ctx, k.Meta, MetaLeft, "seq"))
		}
	}
	_, _ = pipe.Exec(ctx)
	stats, statsErr := o.engine.StatsOf(ctx, as)
	out := make(map[int64]Observation, len(as))
	var errs []error
next:
	for i, a := range as {
		obs := Observation{At: at, Loaded: true}
		if len(metas[i]) > 1 {
			obs.Buckets = make([]int64, len(metas[i]))
		}
		for b, c := range metas[i] {
			v, err := c.Result()
			if err != nil {
				errs = append(errs, err)
				continue next
			}
			left, ok := v[0].(string)
			if !ok {
				obs.Loaded = false
				continue
			}
			n, err := strconv.ParseInt(left, 10, 64)
			if err != nil {
				errs = append(errs, fmt.Errorf("stock: remaining stock %q: %w", left, err))
				continue next
			}
			obs.Remaining += n
			if obs.Buckets != nil {
				obs.Buckets[b] = n
			}
			if seq, _ := v[1].(string); seq != "" {
				if n, err := strconv.ParseInt(seq, 10, 64); err == nil && n > 0 {
					obs.Seq = max(obs.Seq, n)
				}
			}
		}
		if !obs.Loaded {
			obs.Remaining, obs.Buckets = 0, nil
		}
		if statsErr != nil {
			continue
		}
		obs.Stream = stats[a.ID]
		out[a.ID] = obs
	}
	if statsErr != nil {
		errs = append(errs, statsErr)
	}
	return out, errors.Join(errs...)
}

// Memory returns the memory figures of every Redis master, read at most
// maxAge ago (a node that does not answer is left out).
func (o *Observer) Memory(ctx context.Context, maxAge time.Duration) []NodeMemory {
	o.mu.Lock()
	if time.Since(o.memAt) < maxAge {
		defer o.mu.Unlock()
		return o.memory
	}
	o.mu.Unlock()
	o.refresh.Lock()
	defer o.refresh.Unlock()
	o.mu.Lock()
	if time.Since(o.memAt) < maxAge { // read while this call waited
		defer o.mu.Unlock()
		return o.memory
	}
	o.mu.Unlock()
	nodes := readMemory(ctx, o.engine.rdb)
	o.mu.Lock()
	defer o.mu.Unlock()
	o.memory, o.memAt = nodes, time.Now()
	return nodes
}
