// Package stock is the Redis side of a sale: the atomic grab, warm-up of an
// activity into Redis, and compensation of failed orders. Each step is one
// Lua script (scripts/*.lua) over keys that share the activity's hash tag,
// so the same code runs on a single Redis, Sentinel and Redis Cluster.
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

	grabScript       = redis.NewScript(grabSrc)
	loadScript       = redis.NewScript(loadSrc)
	compensateScript = redis.NewScript(compensateSrc)
	reconcileScript  = redis.NewScript(reconcileSrc)
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
}

// Engine runs the scripts. It is safe for concurrent use; Close stops the
// goroutines that combine grabs.
type Engine struct {
	rdb  redis.UniversalClient
	cfg  Config
	quit chan struct{}
	wg   sync.WaitGroup

	// closing is held for reading while a grab enters a queue, so that Close
	// (holding it for writing) knows every queued grab is answered, by a
	// script call or by the drain.
	closing sync.RWMutex
	closed  bool

	mu        sync.Mutex
	combiners map[int64]*combiner
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
	return &Engine{rdb: rdb, cfg: cfg, quit: make(chan struct{}), combiners: map[int64]*combiner{}}
}

// Client returns the Redis client the engine uses.
func (e *Engine) Client() redis.UniversalClient { return e.rdb }

// Prefix returns the key namespace.
func (e *Engine) Prefix() string { return e.cfg.Prefix }

// Keys returns the keys of an activity.
func (e *Engine) Keys(activityID int64) Keys { return KeysFor(e.cfg.Prefix, activityID) }

// EventsChannel is the pub/sub channel on which compensation announces that
// stock of an activity came back (message: the activity id).
func (e *Engine) EventsChannel() string { return e.cfg.Prefix + ":events" }

// WakeChannel is the pub/sub channel on which grab.lua wakes the workers
// (message: the activity id) when an order arrives on a stream that no
// worker is known to be reading (see Keys.Awake).
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

var errClosed = errors.New("stock: engine closed")

// Result is the answer to one grab.
type Result struct {
	OrderID   int64 // the new order, or the user's existing one
	New       bool  // false: the user already had OrderID
	Remaining int64 // stock left in Redis after the batch
}

// Grab tries to take one unit of the activity's stock for user uid under the
// new order id oid. It returns a Result, or an error: ErrNotLoaded, or a
// *seckill.Error with code ESOLDOUT, ENOTSTARTED or EENDED (wrapped with the
// remaining stock as SoldOut for the sold-out case), or a Redis error.
func (e *Engine) Grab(ctx context.Context, activityID, uid, oid int64) (Result, error) {
	e.closing.RLock()
	if e.closed {
		e.closing.RUnlock()
		return Result{}, errClosed
	}
	r, err := e.combiner(activityID).enqueue(ctx, uid, oid)
	e.closing.RUnlock()
	if err != nil {
		return Result{}, err
	}
	return r.wait()
}

// combiner returns the activity's combiner, starting it on first use.
// The caller holds e.closing for reading.
func (e *Engine) combiner(activityID int64) *combiner {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.combiners[activityID]
	if c == nil {
		c = &combiner{e: e, id: activityID, keys: e.Keys(activityID), queue: make(chan *grabReq, 4*e.cfg.MaxBatch)}
		e.combiners[activityID] = c
		for range e.cfg.Pipelines {
			e.wg.Add(1)
			go func() {
				defer e.wg.Done()
				c.run()
			}()
		}
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

// decodeBatch turns grab.lua's reply into one result or error per request.
func decodeBatch(reply any, n int) ([]Result, []error, error) {
	arr, ok := reply.([]any)
	if !ok || len(arr) < 2 {
		return nil, nil, fmt.Errorf("stock: unexpected grab reply %v", reply)
	}
	status, _ := arr[0].(int64)
	remaining, _ := arr[1].(int64)
	res := make([]Result, n)
	errs := make([]error, n)
	var batchErr error
	switch status {
	case statusOK:
		if len(arr) != 2+2*n {
			return nil, nil, fmt.Errorf("stock: grab reply has %d elements for %d grabs", len(arr), n)
		}
	case statusNotLoaded:
		batchErr = ErrNotLoaded
	case statusNotStarted:
		batchErr = ErrNotStarted
	case statusEnded:
		batchErr = ErrEnded
	default:
		return nil, nil, fmt.Errorf("stock: unexpected grab status %d", status)
	}
	for i := range n {
		res[i].Remaining = remaining
		if batchErr != nil {
			errs[i] = batchErr
			continue
		}
		code, _ := arr[2+2*i].(int64)
		oidStr, _ := arr[3+2*i].(string)
		switch code {
		case codeNew, codeExists:
			oid, err := strconv.ParseInt(oidStr, 10, 64)
			if err != nil {
				errs[i] = fmt.Errorf("stock: bad order id %q in redis: %w", oidStr, err)
				continue
			}
			res[i].OrderID, res[i].New = oid, code == codeNew
		case codeSoldOut:
			errs[i] = ErrSoldOut
		default:
			errs[i] = fmt.Errorf("stock: unexpected grab code %d", code)
		}
	}
	return res, errs, nil
}

// Load makes the activity available for grabs with the given remaining stock
// and buyers (as the database knows them), unless Redis holds it already.
// It reports whether this call loaded it. Callers serialize loads with a lock
// to save work; correctness does not depend on it: the last step is
// load-if-absent.
func (e *Engine) Load(ctx context.Context, a seckill.Activity, buyers []seckill.Buyer) (bool, error) {
	k := e.Keys(a.ID)
	if n, err := e.rdb.Exists(ctx, k.Meta).Result(); err != nil || n == 1 {
		return false, err
	}
	const chunk = 1000
	for i := 0; i < len(buyers); i += chunk {
		part := buyers[i:min(i+chunk, len(buyers))]
		args := make([]any, 0, 2*len(part))
		for _, b := range part {
			uid, oid := strconv.FormatInt(b.UserID, 10), strconv.FormatInt(b.OrderID, 10)
			args = append(args, uid, oid)
		}
		if err := e.rdb.HSet(ctx, k.Buyers, args...).Err(); err != nil {
			return false, fmt.Errorf("stock: load buyers of activity %d: %w", a.ID, err)
		}
	}
	n, err := loadScript.Run(ctx, e.rdb, []string{k.Meta, k.Stock, k.Orders},
		a.StartsAt.UnixMilli(), a.EndsAt.UnixMilli(), a.Stock, a.Remaining, Group).Int()
	if err != nil {
		return false, fmt.Errorf("stock: load activity %d: %w", a.ID, err)
	}
	return n == 1, nil
}

// Loaded reports whether Redis holds the activity.
func (e *Engine) Loaded(ctx context.Context, activityID int64) (bool, error) {
	n, err := e.rdb.Exists(ctx, e.Keys(activityID).Meta).Result()
	return n == 1, err
}

// Remaining returns the stock left in Redis; ErrNotLoaded if Redis does not
// hold the activity.
func (e *Engine) Remaining(ctx context.Context, activityID int64) (int64, error) {
	n, err := e.rdb.Get(ctx, e.Keys(activityID).Stock).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, ErrNotLoaded
	}
	return n, err
}

// PendingOrder reports whether Redis holds order oid of the activity, and
// whose it is. With the owner's uid it is one lookup; without (an admin
// asking) it searches the order stream around the time the id was issued,
// so it finds orders not yet acknowledged, or acknowledged and not yet
// trimmed.
func (e *Engine) PendingOrder(ctx context.Context, activityID, oid, uid int64, issued time.Time) (int64, bool, error) {
	k := e.Keys(activityID)
	want := strconv.FormatInt(oid, 10)
	if uid != 0 {
		s, err := e.rdb.HGet(ctx, k.Buyers, strconv.FormatInt(uid, 10)).Result()
		if errors.Is(err, redis.Nil) {
			return 0, false, nil
		}
		return uid, err == nil && s == want, err
	}
	// Ids come from the instances' clocks, entry ids from Redis': allow for
	// skew. The window is bounded, and so is the work.
	from := strconv.FormatInt(issued.Add(-2*time.Second).UnixMilli(), 10)
	to := strconv.FormatInt(issued.Add(2*time.Second).UnixMilli(), 10)
	const page = 1000
	for range 100 {
		msgs, err := e.rdb.XRangeN(ctx, k.Orders, from, to, page).Result()
		if err != nil || len(msgs) == 0 {
			return 0, false, err
		}
		for _, m := range msgs {
			if m.Values["o"] == want {
				uid, err := strconv.ParseInt(fmt.Sprint(m.Values["u"]), 10, 64)
				return uid, err == nil, err
			}
		}
		if len(msgs) < page {
			return 0, false, nil
		}
		next, err := nextID(msgs[len(msgs)-1].ID)
		if err != nil {
			return 0, false, err
		}
		from = next
	}
	return 0, false, nil
}

// Compensate gives back the stock and buyer mark of order oid of user uid,
// exactly once (see compensate.lua). keepOrder, if not 0, is the user's
// order in the database (oid failed as its duplicate), which the user keeps
// along with the unit. It reports whether anything was done.
func (e *Engine) Compensate(ctx context.Context, activityID, uid, oid, keepOrder int64) (bool, error) {
	k := e.Keys(activityID)
	keep := ""
	if keepOrder != 0 {
		keep = strconv.FormatInt(keepOrder, 10)
	}
	n, err := compensateScript.Run(ctx, e.rdb, []string{k.Stock, k.Buyers, k.Debt},
		uid, oid, keep, e.EventsChannel(), activityID).Int()
	if err != nil {
		return false, fmt.Errorf("stock: compensate order %d: %w", oid, err)
	}
	return n == 1, nil
}

// Reconcile makes Redis account for orders the database confirmed (see
// reconcile.lua): the buyer marks and the units of those Redis does not
// know. It is idempotent. It returns the units taken, or ErrNotLoaded.
func (e *Engine) Reconcile(ctx context.Context, activityID int64, buyers []seckill.Buyer) (int64, error) {
	if len(buyers) == 0 {
		return 0, nil
	}
	k := e.Keys(activityID)
	var total int64
	const chunk = 1000
	for i := 0; i < len(buyers); i += chunk {
		part := buyers[i:min(i+chunk, len(buyers))]
		args := make([]any, 0, 2*len(part))
		for _, b := range part {
			args = append(args, strconv.FormatInt(b.UserID, 10), strconv.FormatInt(b.OrderID, 10))
		}
		n, err := reconcileScript.Run(ctx, e.rdb, []string{k.Meta, k.Stock, k.Buyers, k.Debt}, args...).Int64()
		if err != nil {
			return total, fmt.Errorf("stock: reconcile activity %d: %w", activityID, err)
		}
		if n < 0 {
			return total, ErrNotLoaded
		}
		total += n
	}
	return total, nil
}

// Preload loads the scripts into the server's cache so that the first grabs
// do not pay for a NOSCRIPT round trip. On a cluster it loads on every
// master.
func (e *Engine) Preload(ctx context.Context) error {
	load := func(ctx context.Context, c redis.Scripter) error {
		for _, s := range []*redis.Script{grabScript, loadScript, compensateScript, reconcileScript} {
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
