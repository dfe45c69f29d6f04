// Package stock is the Redis side of a sale: the atomic grab, which also
// issues the order ids, warm-up of an activity into Redis, compensation of
// failed orders, the return of the units of cancelled and expired orders,
// and the buyer snapshot of a sold-out activity. Each step
// that writes is one Lua script (scripts/*.lua) over keys that share the
// activity's hash tag, so the same code runs on a single Redis, Sentinel
// and Redis Cluster, and on the embedded server of `seckill demo`.
//
// Redis holds only the local part of an order id (below 2^39, exact in a
// Lua double); this package composes and splits full ids at its boundary
// (seckill.OrderID).
//
// Concurrent grabs of one activity are combined: while one script call is
// in flight, new grabs queue up and go together in the next call. Under a
// crowd this turns hundreds of round trips into a few, and costs a lone
// request nothing (it is sent at once).
package stock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill"
)

var (
	//go:embed scripts/grab.lua
	grabSrc string
	//go:embed scripts/load.lua
	loadSrc string
	//go:embed scripts/compensate.lua
	compensateSrc string
	//go:embed scripts/reconcile.lua
	reconcileSrc string
	//go:embed scripts/return.lua
	returnSrc string

	grabScript       = redis.NewScript(grabSrc)
	loadScript       = redis.NewScript(loadSrc)
	compensateScript = redis.NewScript(compensateSrc)
	reconcileScript  = redis.NewScript(reconcileSrc)
	returnScript     = redis.NewScript(returnSrc)
)

// ErrNotLoaded means Redis does not hold the activity (never loaded, or
// lost in a restart without persistence): it must be loaded from the
// database before grabs can be answered.
var ErrNotLoaded = errors.New("stock: activity not loaded in redis")

// Group is the consumer group of every activity's order stream.
const Group = "workers"

// Config tunes an Engine. Zero values take the defaults.
type Config struct {
	// Prefix namespaces every key. Default DefaultPrefix ("seckill").
	Prefix string
	// MaxBatch bounds the grabs combined in one script call. Default 128.
	MaxBatch int
	// Pipelines is how many script calls per activity may be in flight at
	// once. Default 1: every grab that arrives while a call is in flight
	// joins the next one, which makes the batches as large as the crowd
	// allows (measured: more grabs per second than 2, at a similar p99).
	Pipelines int
	// CombinerIdle is how long an activity's combiner waits for a grab
	// before its goroutines end; the next grab starts them again. Default
	// 1s. Goroutines follow the activities being grabbed, not all the
	// activities ever grabbed.
	CombinerIdle time.Duration

	// AckReplicas, if above 0, makes a grab's yes durable: every script
	// call is followed, on the connection of the master that ran it, by
	// WAIT AckReplicas AckTimeout, and its grabs are answered with their
	// order only if that many replicas confirmed the call's writes
	// (else ErrOutcomeUnknown). Default 0: no WAIT, no extra round trip;
	// Redis replicates asynchronously, and a failover loses the writes
	// the promoted replica had not received.
	AckReplicas int
	// AckTimeout bounds each WAIT. Default DefaultAckTimeout. The Redis
	// client's read timeout (1s with Dial) bounds the script and its WAIT
	// together: keep AckTimeout well below it.
	AckTimeout time.Duration
	// RetryFor bounds how long a grab that surely did not run (no
	// connection to the master, or refused by it: a failover under way)
	// is sent again, within its caller's ctx. Default 2s; negative: never.
	// A grab that may have run is never sent again.
	RetryFor time.Duration
}

// DefaultAckTimeout is the default Config.AckTimeout: hundreds of times a
// replica's acknowledgement on a healthy network (well under a
// millisecond on a LAN), so that only a replica that is cut off or stalled
// misses it, and short enough to leave half of the client's 1s read
// timeout to the script under load.
const DefaultAckTimeout = 500 * time.Millisecond

// Engine runs the scripts. It is safe for concurrent use; Close stops the
// goroutines that combine grabs.
type Engine struct {
	rdb    redis.UniversalClient
	cfg    Config
	reload reloader
	quit   chan struct{}
	wg     sync.WaitGroup

	// closing is held for reading while a grab enters a queue, so that Close
	// (holding it for writing) knows every queued grab is answered, by a
	// script call or by the drain.
	closing sync.RWMutex
	closed  bool

	// mu guards combiners and each combiner's running count: a grab takes
	// its combiner under mu (for reading while the combiner runs, for
	// writing to create it or start its goroutines), and an idle combiner
	// goroutine ends under mu held for writing (see combiner.retire).
	mu        sync.RWMutex
	combiners map[shard]*combiner

	layoutsMu sync.Mutex
	layouts   map[shardsKey]*shards
	borrows   borrowStats
	// oneNode: every key is on one server (not a Cluster), so one script
	// call may take the grabs of several buckets.
	oneNode bool
}

// shard names one bucket of an activity (b -1: all of them).
type shard struct {
	id int64
	b  int
}

// New returns an Engine on rdb (standalone, Sentinel or Cluster client).
func New(rdb redis.UniversalClient, cfg Config) *Engine {
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 128
	}
	if cfg.Pipelines <= 0 {
		cfg.Pipelines = 1
	}
	if cfg.CombinerIdle <= 0 {
		cfg.CombinerIdle = time.Second
	}
	if cfg.AckTimeout <= 0 {
		cfg.AckTimeout = DefaultAckTimeout
	}
	cfg.AckTimeout = max(cfg.AckTimeout, minAckTimeout)
	if cfg.RetryFor == 0 {
		cfg.RetryFor = 2 * time.Second
	}
	e := &Engine{rdb: rdb, cfg: cfg, quit: make(chan struct{}), combiners: map[shard]*combiner{}, layouts: map[shardsKey]*shards{}}
	e.reload.cc, _ = rdb.(*redis.ClusterClient)
	_, e.oneNode = rdb.(*redis.Client)
	return e
}

// Closed reports whether Close was called.
func (e *Engine) Closed() bool {
	e.closing.RLock()
	defer e.closing.RUnlock()
	return e.closed
}

// Client returns the Redis client the engine uses.
func (e *Engine) Client() redis.UniversalClient { return e.rdb }

// Prefix returns the key namespace.
func (e *Engine) Prefix() string { return e.cfg.Prefix }

// Keys returns the keys of each bucket of activity a (one set with one
// bucket).
func (e *Engine) Keys(a seckill.Activity) []Keys { return slices.Clone(e.layout(&a).keys) }

// EventsChannel is the pub/sub channel on which compensation and returns
// announce that stock of an activity came back (message: the activity id).
func (e *Engine) EventsChannel() string { return e.cfg.Prefix + ":events" }

// WakeChannel is the pub/sub channel on which grab.lua wakes the workers
// (message: the activity id) when an order arrives on a stream that no
// worker is known to be reading (see MetaAwake).
func (e *Engine) WakeChannel() string { return e.cfg.Prefix + ":wake" }

// Close stops the combiners; grabs still queued in them fail.
func (e *Engine) Close() {
	e.closing.Lock()
	if !e.closed {
		e.closed = true
		close(e.quit)
	}
	e.closing.Unlock()
	e.wg.Wait()
}

// Result is the answer to one grab.
type Result struct {
	OrderID   int64 // the new order, or the user's existing one (a full id, see seckill.OrderID)
	New       bool  // false: the user already had OrderID
	Remaining int64 // stock left in Redis after the batch
}

// Grab tries to take one unit of activity a's stock for user uid, in the
// user's home bucket (see bucket.go); Redis issues the new order's id (see
// grab.lua). It returns a Result, or an error: ErrNotLoaded, ErrSoldOut
// (only once every bucket is empty), ErrNotStarted, ErrEnded (*seckill.Error
// values); when Redis did not answer, an error wrapping ErrUnavailable
// (the grab surely did not run) or ErrOutcomeUnknown (it may have: the
// user's next grab tells); ctx's error if it ended before the grab was
// sent. A grab that surely did not run is sent again for up to RetryFor.
func (e *Engine) Grab(ctx context.Context, a seckill.Activity, uid int64) (Result, error) {
	res, err := e.grab(ctx, &a, uid)
	if ge, ok := err.(*grabError); ok && ge.retry && e.cfg.RetryFor > 0 {
		return e.regrab(ctx, &a, uid, err)
	}
	return res, err
}

// regrab sends again a grab that surely did not run, after a growing
// pause, while its refusals say that it did not, for up to RetryFor and
// while ctx lasts: long enough to ride out a master's failover, not so
// long that a caller waits on a Redis that stays away.
func (e *Engine) regrab(ctx context.Context, a *seckill.Activity, uid int64, err error) (Result, error) {
	deadline := time.Now().Add(e.cfg.RetryFor)
	for pause := 20 * time.Millisecond; ; pause = min(2*pause, 250*time.Millisecond) {
		d := pause/2 + rand.N(pause/2+1)
		if time.Now().Add(d).After(deadline) {
			return Result{}, err
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return Result{}, err
		case <-t.C:
		}
		res, next := e.grab(ctx, a, uid)
		if ge, ok := next.(*grabError); !ok || !ge.retry {
			if next != nil && ctx.Err() != nil && errors.Is(next, ctx.Err()) {
				return Result{}, err // ended before the grab was queued again
			}
			return res, next
		}
		err = next
	}
}

func (e *Engine) grab(ctx context.Context, a *seckill.Activity, uid int64) (Result, error) {
	e.closing.RLock()
	if e.closed {
		e.closing.RUnlock()
		return Result{}, errClosed
	}
	b := Home(uid, a.BucketCount())
	c := e.combiner(a, b)
	r, err := c.enqueue(ctx, uid, b)
	c.users.Add(-1)
	e.closing.RUnlock()
	if err != nil {
		return Result{}, err
	}
	return r.wait()
}

// combiner returns the combiner of bucket b of activity a (on a single
// Redis, the one of every bucket), counted as used until the caller's grab
// is queued (the caller then decrements users), and makes sure its
// goroutines run: it creates the combiner on first use, and restarts
// goroutines that ended while it was idle. The caller holds e.closing for
// reading.
func (e *Engine) combiner(a *seckill.Activity, b int) *combiner {
	key := shard{a.ID, b}
	if e.oneNode {
		key.b = -1
	}
	// The common case, a crowd on a running combiner, shares the lock:
	// retire, which could end its goroutines, waits for it.
	e.mu.RLock()
	if c := e.combiners[key]; c != nil && c.running >= e.cfg.Pipelines {
		c.users.Add(1)
		e.mu.RUnlock()
		return c
	}
	e.mu.RUnlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.combiners[key]
	if c == nil {
		s := e.layout(a)
		c = &combiner{e: e, id: a.ID, b: key.b, s: s, queue: make(chan *grabReq, 4*e.cfg.MaxBatch)}
		e.combiners[key] = c
	}
	c.users.Add(1)
	for c.running < e.cfg.Pipelines {
		c.running++
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			c.run()
		}()
	}
	return c
}

// grab status codes (see grab.lua).
const (
	statusOK         = 0
	statusNotLoaded  = 1
	statusNotStarted = 2
	statusEnded      = 3

	codeNew     = 0
	codeExists  = 1
	codeSoldOut = 2
)

// ErrSoldOut is returned (matching seckill's ESOLDOUT code) for a grab that
// found no stock.
var ErrSoldOut = seckill.Errorf(seckill.ESOLDOUT, "sold out")

// ErrNotStarted and ErrEnded answer grabs outside the sale window.
var (
	ErrNotStarted = seckill.Errorf(seckill.ENOTSTARTED, "the sale has not started")
	ErrEnded      = seckill.Errorf(seckill.EENDED, "the sale has ended")
)

// decodeGroups turns grab.lua's reply into one result or error per grab,
// the groups' grabs one after the other; sizes holds each group's number
// of grabs.
func decodeGroups(activityID int64, reply any, sizes []int) ([]Result, []error, error) {
	arr, ok := reply.([]any)
	if !ok {
		return nil, nil, fmt.Errorf("stock: unexpected grab reply %v", reply)
	}
	total := 0
	for _, n := range sizes {
		total += n
	}
	res := make([]Result, total)
	errs := make([]error, total)
	pos, at := 0, 0
	for _, n := range sizes {
		if pos+2 > len(arr) {
			return nil, nil, fmt.Errorf("stock: grab reply has %d elements for %d groups", len(arr), len(sizes))
		}
		status, _ := arr[pos].(int64)
		remaining, _ := arr[pos+1].(int64)
		pos += 2
		var groupErr error
		switch status {
		case statusOK:
			if pos+2*n > len(arr) {
				return nil, nil, fmt.Errorf("stock: grab reply has %d elements for %d grabs", len(arr), total)
			}
		case statusNotLoaded:
			groupErr = ErrNotLoaded
		case statusNotStarted:
			groupErr = ErrNotStarted
		case statusEnded:
			groupErr = ErrEnded
		default:
			return nil, nil, fmt.Errorf("stock: unexpected grab status %d", status)
		}
		for i := at; i < at+n; i++ {
			res[i].Remaining = remaining
			if groupErr != nil {
				errs[i] = groupErr
				continue
			}
			code, _ := arr[pos].(int64)
			localStr, _ := arr[pos+1].(string)
			pos += 2
			switch code {
			case codeNew, codeExists:
				oid, err := orderID(activityID, localStr)
				if err != nil {
					errs[i] = err
					continue
				}
				res[i].OrderID, res[i].New = oid, code == codeNew
			case codeSoldOut:
				errs[i] = ErrSoldOut
			default:
				errs[i] = fmt.Errorf("stock: unexpected grab code %d", code)
			}
		}
		at += n
	}
	if pos != len(arr) {
		return nil, nil, fmt.Errorf("stock: grab reply has %d elements, %d read", len(arr), pos)
	}
	return res, errs, nil
}

// orderID composes the full order id of a local id that Redis holds.
func orderID(activityID int64, local string) (int64, error) {
	n, err := strconv.ParseInt(local, 10, 64)
	if err != nil || n <= 0 || n > seckill.MaxOrderLocal {
		return 0, fmt.Errorf("stock: bad local order id %q in redis (activity %d)", local, activityID)
	}
	return seckill.OrderID(activityID, n), nil
}

// localID returns the decimal local part of an order id of the activity, as
// Redis holds it; false if the id belongs to another activity.
func localID(activityID, orderID int64) (string, bool) {
	if seckill.OrderActivity(orderID) != activityID || seckill.OrderLocal(orderID) == 0 {
		return "", false
	}
	return strconv.FormatInt(seckill.OrderLocal(orderID), 10), true
}

// LoadOption adds to what Load is told about the activity.
type LoadOption func(*loadOptions)

type loadOptions struct {
	lastOrderID int64
	returned    []int64
}

// OrdersAfter tells Load the highest order id the activity has used that the
// buyers do not show (seckill.Store.LastOrderID: failed orders too): new
// order ids are issued past it.
func OrdersAfter(orderID int64) LoadOption {
	return func(o *loadOptions) { o.lastOrderID = max(o.lastOrderID, orderID) }
}

// ReturnedOrders tells Load the activity's orders whose units the database
// snapshot has given back (seckill.Loaded.Returned): their receipts are
// loaded with the activity, so that a Return of one of them (the Redis half
// of a return that the snapshot already reflects) changes nothing.
func ReturnedOrders(orderIDs []int64) LoadOption {
	return func(o *loadOptions) { o.returned = append(o.returned, orderIDs...) }
}

// Load makes the activity available for grabs with the given remaining stock
// and buyers (as the database knows them), unless Redis holds it already.
// It reports whether this call loaded it. Callers serialize loads with a lock
// to save work; correctness does not depend on it: the last step is
// load-if-absent. New order ids continue past the buyers' orders, the
// OrdersAfter option, and any entry the activity's stream still holds.
// Buyers whose order id belongs to another activity are not loaded (the
// database refuses a second order of theirs anyway). The receipts of the
// ReturnedOrders option are loaded only if this call loads the activity.
//
// An activity of several buckets is loaded bucket by bucket, each
// load-if-absent, its buyers and receipts in their home buckets. When no
// bucket is held, the remaining stock is split evenly; when some are (a
// Cluster master lost its data, the others kept theirs), the missing ones
// share what the held ones do not account for: the remaining stock less
// their stock, their transfers in flight and their orders not yet written.
// It reports whether this call loaded any bucket.
func (e *Engine) Load(ctx context.Context, a seckill.Activity, buyers []seckill.Buyer, opts ...LoadOption) (bool, error) {
	var o loadOptions
	for _, opt := range opts {
		opt(&o)
	}
	s := e.layout(&a)
	n := len(s.keys)
	held, err := e.held(ctx, s)
	if err != nil {
		return false, err
	}
	missing := 0
	for _, h := range held {
		if !h {
			missing++
		}
	}
	if missing == 0 {
		return false, nil
	}
	shares, err := e.shares(ctx, &a, s, held, missing)
	if err != nil {
		return false, err
	}
	if n > 1 {
		if err := e.rdb.Set(ctx, KeysFor(e.cfg.Prefix, a.ID).Layout, n, 0).Err(); err != nil {
			return false, fmt.Errorf("stock: load activity %d: %w", a.ID, err)
		}
	}
	var last int64
	if seckill.OrderActivity(o.lastOrderID) == a.ID {
		last = seckill.OrderLocal(o.lastOrderID)
	}
	homes := make([][]seckill.Buyer, n)
	for _, b := range buyers {
		if _, ok := localID(a.ID, b.OrderID); ok {
			last = max(last, seckill.OrderLocal(b.OrderID))
			h := Home(b.UserID, n)
			homes[h] = append(homes[h], b)
		}
	}
	returned := make([][]int64, n)
	for _, id := range o.returned {
		b := 0
		if seckill.OrderActivity(id) == a.ID {
			b = Bucket(id, n)
		}
		returned[b] = append(returned[b], id)
	}
	loadedAny := false
	for b, h := range held {
		if h {
			continue
		}
		ok, err := e.loadBucket(ctx, &a, s.keys[b], homes[b], returned[b], shares[b], last)
		if err != nil {
			return loadedAny, err
		}
		loadedAny = loadedAny || ok
	}
	return loadedAny, nil
}

// held reports which buckets of s Redis holds, in one pipelined round.
func (e *Engine) held(ctx context.Context, s *shards) ([]bool, error) {
	return perBucket(ctx, e, s, func(p redis.Pipeliner, k Keys) *redis.IntCmd { return p.Exists(ctx, k.Meta) },
		func(c *redis.IntCmd) (bool, error) {
			n, err := c.Result()
			return n == 1, err
		})
}

// perBucket sends one command a bucket of s, made by send, in one
// pipelined round, and returns each bucket's reply as read reads it; the
// first error of a reply is the error.
func perBucket[C redis.Cmder, T any](ctx context.Context, e *Engine, s *shards, send func(redis.Pipeliner, Keys) C, read func(C) (T, error)) ([]T, error) {
	cmds := make([]C, len(s.keys))
	pipe := e.rdb.Pipeline()
	for b, k := range s.keys {
		cmds[b] = send(pipe, k)
	}
	_, _ = pipe.Exec(ctx)
	out := make([]T, len(cmds))
	for b, c := range cmds {
		v, err := read(c)
		if err != nil {
			return nil, err
		}
		out[b] = v
	}
	return out, nil
}

// share is what a missing bucket is loaded with: its units, and the
// transfer counters that keep Q true (see borrow.go).
type share struct{ units, in, out int64 }

// shares returns what each missing bucket of s gets at a load (see Load);
// missing counts them. When some buckets are held, the first missing one
// also takes the transfer counters that make the activity's Q count the
// units in flight again: the held buckets' counters name transfers with
// the lost ones, whose own counters are gone.
func (e *Engine) shares(ctx context.Context, a *seckill.Activity, s *shards, held []bool, missing int) ([]share, error) {
	left := a.Remaining
	var flows int64 // out - in of the held buckets, less their transfers in flight
	if missing < len(s.keys) {
		accounted, f, err := e.accounted(ctx, s, held)
		if err != nil {
			return nil, err
		}
		left, flows = max(0, left-accounted), f
	}
	out := make([]share, len(s.keys))
	i := int64(0)
	for b, h := range held {
		if h {
			continue
		}
		out[b].units = left / int64(missing)
		if i < left%int64(missing) {
			out[b].units++
		}
		if i == 0 {
			// Σ out - Σ in over every bucket must equal the units in flight.
			out[b].in, out[b].out = max(0, flows), max(0, -flows)
		}
		i++
	}
	return out, nil
}

// accounted returns the units the held buckets of s account for: their
// stock less their debt, their transfers not yet known to be credited, and
// their orders not yet written to the database; and flows, their out - in
// less their transfers in flight.
func (e *Engine) accounted(ctx context.Context, s *shards, held []bool) (units, flows int64, err error) {
	lv, err := e.levels(ctx, s)
	if err != nil {
		return 0, 0, err
	}
	var keys []string
	for b, l := range lv {
		if !held[b] || !l.loaded {
			continue
		}
		units += l.stock - l.debt
		flows += l.out - l.in
		keys = append(keys, s.keys[b].Orders)
		if l.journal > 0 {
			entries, err := e.rdb.HVals(ctx, s.keys[b].Journal).Result()
			if err != nil {
				return 0, 0, err
			}
			for _, v := range entries {
				if _, k, err := parseTransfer(v, len(s.keys)); err == nil {
					units += k
					flows -= k
				}
			}
		}
	}
	stats, err := e.statsOfKeys(ctx, keys)
	if err != nil {
		return 0, 0, err
	}
	for _, st := range stats {
		units += st.Backlog()
	}
	return units, flows, nil
}

// loadBucket loads one bucket (keys k) with its buyers, the receipts of its
// returned orders and its share, unless Redis holds it; it reports whether
// this call loaded it.
func (e *Engine) loadBucket(ctx context.Context, a *seckill.Activity, k Keys, buyers []seckill.Buyer, returned []int64, sh share, last int64) (bool, error) {
	const chunk = 1000
	for part := range slices.Chunk(buyers, chunk) {
		args := make([]any, 0, 2*len(part))
		for _, b := range part {
			local, _ := localID(a.ID, b.OrderID)
			args = append(args, strconv.FormatInt(b.UserID, 10), local)
		}
		if err := e.rdb.HSet(ctx, k.Buyers, args...).Err(); err != nil {
			return false, fmt.Errorf("stock: load buyers of activity %d: %w", a.ID, err)
		}
	}
	staged, err := e.stageReceipts(ctx, a.ID, k, returned)
	if err != nil {
		return false, err
	}
	n, err := loadScript.Run(ctx, e.rdb, []string{k.Meta, k.legacyStock, k.Orders, k.Returned, staged},
		a.StartsAt.UnixMilli(), a.EndsAt.UnixMilli(), a.Stock, sh.units, Group, strconv.FormatInt(last, 10), sh.in, sh.out).Int()
	if err != nil {
		return false, fmt.Errorf("stock: load activity %d: %w", a.ID, err)
	}
	return n == 1, nil
}

// stageTTL bounds how long the receipts staged by a load that did not get
// to load.lua (its process died) stay in Redis.
const stageTTL = 10 * time.Minute

// stageReceipts writes the receipts of the returned orders under a key of
// this load's own, which load.lua makes the receipt set if it loads the
// activity (and deletes otherwise). It returns the key.
func (e *Engine) stageReceipts(ctx context.Context, activityID int64, k Keys, returned []int64) (string, error) {
	key := k.Returned + ":load:" + strconv.FormatUint(rand.Uint64(), 36)
	const chunk = 1000
	for part := range slices.Chunk(returned, chunk) {
		members := make([]any, len(part))
		for i, id := range part {
			members[i], _ = receipt(activityID, id)
		}
		_, err := e.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.SAdd(ctx, key, members...)
			p.PExpire(ctx, key, stageTTL)
			return nil
		})
		if err != nil {
			return "", fmt.Errorf("stock: load returned orders of activity %d: %w", activityID, err)
		}
	}
	return key, nil
}

// receipt returns the receipt of an order of the activity (see return.lua)
// and the local id a buyer mark of it holds: its local id, or, for an id
// outside the activity's range, which no mark holds, "o<id>" and "".
func receipt(activityID, orderID int64) (member, mark string) {
	if local, ok := localID(activityID, orderID); ok {
		return local, local
	}
	return "o" + strconv.FormatInt(orderID, 10), ""
}

// ReturnResult is what Return did. Every result means that the Redis half
// of the return is done: the caller records it (Store.Restocked).
type ReturnResult int

const (
	// Returned: this call gave the unit back to the stock (or paid a debt
	// with it) and, with rebuy, removed the buyer's mark.
	Returned ReturnResult = iota + 1
	// AlreadyReturned: an earlier call did, or the load of the activity
	// from a database snapshot that held the return.
	AlreadyReturned
	// ReturnNotLoaded: Redis does not hold the activity; the load that
	// brings it back reads the database, which holds the return.
	ReturnNotLoaded
)

func (r ReturnResult) String() string {
	switch r {
	case Returned:
		return "returned"
	case AlreadyReturned:
		return "already returned"
	case ReturnNotLoaded:
		return "not loaded"
	}
	return "ReturnResult(" + strconv.Itoa(int(r)) + ")"
}

// Return gives the unit of a cancelled or expired order back to Redis,
// exactly once (see return.lua): stock + 1 (or a debt paid), with r.Rebuy
// the buyer's mark removed so that they may grab again, the epoch moved,
// and the restock announced on EventsChannel. The unit goes to the
// buyer's home bucket, which holds the receipt.
func (e *Engine) Return(ctx context.Context, r seckill.Return) (ReturnResult, error) {
	n := max(1, r.Buckets)
	k := BucketKeys(e.cfg.Prefix, r.ActivityID, n, Home(r.UserID, n))
	member, mark := receipt(r.ActivityID, r.OrderID)
	rebuy := "0"
	if r.Rebuy {
		rebuy = "1"
	}
	res, err := returnScript.Run(ctx, e.rdb, []string{k.Meta, k.Buyers, k.Debt, k.Returned},
		r.UserID, member, mark, rebuy, e.EventsChannel(), r.ActivityID).Int()
	if err != nil {
		return 0, fmt.Errorf("stock: return order %d: %w", r.OrderID, err)
	}
	switch res {
	case 1:
		return Returned, nil
	case 0:
		return AlreadyReturned, nil
	}
	return ReturnNotLoaded, nil
}

// Loaded reports whether Redis holds the activity: every bucket of it.
func (e *Engine) Loaded(ctx context.Context, a seckill.Activity) (bool, error) {
	held, err := e.held(ctx, e.layout(&a))
	if err != nil {
		return false, err
	}
	return !slices.Contains(held, false), nil
}

// Present reports whether Redis holds anything of activity id, whatever
// its layout: its one bucket, or the marker of its several (Keys.Layout).
// One command. For the lookups of order ids whose activity this process
// does not know yet.
func (e *Engine) Present(ctx context.Context, id int64) (bool, error) {
	k := KeysFor(e.cfg.Prefix, id)
	n, err := e.rdb.Exists(ctx, k.Meta, k.Layout).Result()
	return n > 0, err
}

// Remaining returns the stock left in Redis, in every bucket; ErrNotLoaded
// if Redis does not hold the activity (a bucket of it). Units in flight
// between buckets are not counted.
func (e *Engine) Remaining(ctx context.Context, a seckill.Activity) (int64, error) {
	left, err := e.RemainingByBucket(ctx, a)
	if err != nil {
		return 0, err
	}
	var total int64
	for _, n := range left {
		total += n
	}
	return total, nil
}

// RemainingByBucket returns the stock left in each bucket of the activity,
// in one pipelined round; ErrNotLoaded if Redis does not hold a bucket.
func (e *Engine) RemainingByBucket(ctx context.Context, a seckill.Activity) ([]int64, error) {
	return perBucket(ctx, e, e.layout(&a), func(p redis.Pipeliner, k Keys) *redis.StringCmd { return p.HGet(ctx, k.Meta, MetaLeft) },
		func(c *redis.StringCmd) (int64, error) {
			n, err := c.Int64()
			if errors.Is(err, redis.Nil) {
				return 0, ErrNotLoaded
			}
			return n, err
		})
}

// PendingOrder reports whether Redis holds order oid of the activity that
// starts at startsAt, and whose it is, in one command. With the owner's uid
// it reads the user's buyer mark; without (uid 0: an admin asking) it reads
// the order's stream entry, whose id follows from the order id (see
// grab.lua), so it finds orders not yet acknowledged, or acknowledged and
// not yet trimmed. An id of another activity is not found.
func (e *Engine) PendingOrder(ctx context.Context, a seckill.Activity, oid, uid int64) (int64, bool, error) {
	want, ok := localID(a.ID, oid)
	if !ok {
		return 0, false, nil
	}
	return e.owner(ctx, e.rdb, &a, oid, want, uid)()
}

// Held is what Redis knows of an order id (Engine.FindOrder).
type Held struct {
	// Loaded: Redis holds the activity. If not, the rest is unknown: the
	// database answers for the activity's orders.
	Loaded bool
	// Issued: the id is not beyond the last one grab.lua issued for the
	// activity. An id beyond it is no order, yet: the next grab may issue
	// it.
	Issued bool
	// Owner is the order's buyer when Redis holds the order (as
	// PendingOrder finds it: not yet written, or written and its buyer
	// mark or stream entry kept); 0 when it does not.
	Owner int64
}

// FindOrder tells in one round trip whether Redis holds the activity,
// whether it issued order oid, and whose the order is, as PendingOrder
// does: two commands of one hash tag, pipelined. Redis issues ids in
// increasing order (grab.lua), so an id beyond the meta's seq is no order
// until a grab issues it, whatever the number of orders. An id of another
// activity is neither issued nor held. In an activity of several buckets,
// "Loaded" and "Issued" are those of the bucket that would have issued
// the id (see Bucket).
func (e *Engine) FindOrder(ctx context.Context, a seckill.Activity, oid, uid int64) (Held, error) {
	activityID := a.ID
	want, ok := localID(activityID, oid)
	if !ok {
		return Held{Loaded: true}, nil
	}
	s := e.layout(&a)
	pipe := e.rdb.Pipeline()
	meta := pipe.HMGet(ctx, s.keys[Bucket(oid, len(s.keys))].Meta, "starts_ms", "seq")
	owner := e.owner(ctx, pipe, &a, oid, want, uid)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return Held{}, err
	}
	v, err := meta.Result()
	if err != nil {
		return Held{}, err
	}
	if v[0] == nil {
		return Held{}, nil
	}
	str, _ := v[1].(string)
	seq, err := strconv.ParseInt(str, 10, 64)
	if err != nil && str != "" {
		return Held{}, fmt.Errorf("stock: bad seq %q in the meta of activity %d", str, activityID)
	}
	h := Held{Loaded: true, Issued: seckill.OrderLocal(oid) <= seq}
	if h.Owner, ok, err = owner(); err != nil || !ok {
		h.Owner = 0
	}
	return h, err
}

// owner queues on c the one command that finds order oid of activity a
// (want: its local id, as Redis holds it; see PendingOrder), and returns
// what reads its reply once c has run it: the owner, whether Redis holds
// the order. The order's bucket holds both its stream entry and its
// buyer's mark.
func (e *Engine) owner(ctx context.Context, c redis.Cmdable, a *seckill.Activity, oid int64, want string, uid int64) func() (int64, bool, error) {
	s := e.layout(a)
	b := Bucket(oid, len(s.keys))
	k := s.keys[b]
	if uid != 0 {
		if Home(uid, len(s.keys)) != b {
			return func() (int64, bool, error) { return 0, false, nil }
		}
		mark := c.HGet(ctx, k.Buyers, strconv.FormatInt(uid, 10))
		return func() (int64, bool, error) {
			s, err := mark.Result()
			if errors.Is(err, redis.Nil) {
				return 0, false, nil
			}
			return uid, err == nil && s == want, err
		}
	}
	id := EntryID(a.StartsAt, oid)
	entry := c.XRangeN(ctx, k.Orders, id, id, 1)
	return func() (int64, bool, error) {
		msgs, err := entry.Result()
		if err != nil || len(msgs) == 0 || msgs[0].Values["o"] != want {
			return 0, false, err
		}
		owner, err := strconv.ParseInt(fmt.Sprint(msgs[0].Values["u"]), 10, 64)
		return owner, err == nil, err
	}
}

// EntryID is the id of order oid's entry in the order stream of its
// activity, which starts at startsAt (see grab.lua).
func EntryID(startsAt time.Time, oid int64) string {
	local := seckill.OrderLocal(oid)
	return strconv.FormatInt(startsAt.UnixMilli()+local>>seckill.OrderSeqBits, 10) + "-" +
		strconv.FormatInt(local&(1<<seckill.OrderSeqBits-1), 10)
}

// Compensate gives back the stock and buyer mark of order oid of user uid,
// exactly once (see compensate.lua). keepOrder, if not 0, is the user's
// order in the database (oid failed as its duplicate), which the user keeps
// along with the unit. It reports whether anything was done.
func (e *Engine) Compensate(ctx context.Context, a seckill.Activity, uid, oid, keepOrder int64) (bool, error) {
	activityID := a.ID
	local, ok := localID(activityID, oid)
	if !ok {
		// Not an id grab.lua issued for this activity: no mark can hold it.
		return false, nil
	}
	s := e.layout(&a)
	k := s.keys[Home(uid, len(s.keys))]
	keep := ""
	if keepOrder != 0 {
		if keep, ok = localID(activityID, keepOrder); !ok {
			// No mark can name an order of another id range (one issued
			// before ids named their activity): the unit stays taken, as
			// the kept order wants, and the mark stays.
			return false, nil
		}
	}
	n, err := compensateScript.Run(ctx, e.rdb, []string{k.Meta, k.Buyers, k.Debt},
		uid, local, keep, e.EventsChannel(), activityID).Int()
	if err != nil {
		return false, fmt.Errorf("stock: compensate order %d: %w", oid, err)
	}
	return n == 1, nil
}

// Reconcile makes Redis account for orders the database confirmed (see
// reconcile.lua): the buyer marks and the units of those Redis does not
// know, unless their units came back since (a Return's receipt). It is
// idempotent. It returns the units taken, or ErrNotLoaded.
func (e *Engine) Reconcile(ctx context.Context, a seckill.Activity, buyers []seckill.Buyer) (int64, error) {
	if len(buyers) == 0 {
		return 0, nil
	}
	activityID := a.ID
	s := e.layout(&a)
	homes := make([][]any, len(s.keys))
	for _, b := range buyers {
		if local, ok := localID(activityID, b.OrderID); ok {
			h := Home(b.UserID, len(s.keys))
			homes[h] = append(homes[h], strconv.FormatInt(b.UserID, 10), local)
		}
	}
	var total int64
	const chunk = 2000 // 1,000 buyers
	for b, args := range homes {
		k := s.keys[b]
		for part := range slices.Chunk(args, chunk) {
			n, err := reconcileScript.Run(ctx, e.rdb, []string{k.Meta, k.Buyers, k.Debt, k.Returned}, part...).Int64()
			if err != nil {
				return total, fmt.Errorf("stock: reconcile activity %d: %w", activityID, err)
			}
			if n < 0 {
				return total, ErrNotLoaded
			}
			total += n
		}
	}
	return total, nil
}

// Preload loads the scripts into the server's cache so that the first grabs
// do not pay for a NOSCRIPT round trip. On a cluster it loads on every
// master.
func (e *Engine) Preload(ctx context.Context) error {
	load := func(ctx context.Context, c redis.Scripter) error {
		for _, s := range []*redis.Script{grabScript, loadScript, compensateScript, reconcileScript, returnScript,
			levelScript, xferOutScript, xferInScript, journalScript} {
			if err := s.Load(ctx, c).Err(); err != nil {
				return err
			}
		}
		return nil
	}
	if cc, ok := e.rdb.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return load(ctx, c) })
	}
	return load(ctx, e.rdb)
}

func unixMilli(ms int64) time.Time { return time.UnixMilli(ms).UTC() }
