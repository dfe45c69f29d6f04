// Package sale is the application service of a flash sale: it answers the
// use cases (create an activity, grab, ask for an order) by combining the
// database (seckill.Store) and the Redis stock engine (which also issues the
// order ids), and keeps the in-process state that spares Redis and the
// database the bulk of a crowd: an activity cache, the buyers this instance
// has answered, and, once an activity is sold out, a snapshot of all its
// buyers, so that every click after the sell-out is answered from memory,
// with the clicker's order if they hold one.
package sale

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/singleflight"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/stock"
)

// Serializer runs fn while holding the cross-instance lock named key, so
// that several instances do not rebuild the same activity at once. Loading
// is correct without it (the last step is load-if-absent); it saves the
// duplicate database reads.
type Serializer func(ctx context.Context, key string, fn func(ctx context.Context) error) error

// Config tunes a Service. Zero values take the defaults.
type Config struct {
	// SoldOutRecheck bounds how long a sold-out activity's buyer snapshot
	// is trusted without asking Redis (one round trip: is the epoch the
	// same, the stock still 0?), in case a restock message was missed.
	// Default 1s.
	SoldOutRecheck time.Duration
	// NegativeTTL is how long an unknown activity id, or an unknown order
	// id that Redis does not hold, is remembered as unknown; and how old a
	// listing of the activities may be to tell an order lookup that the
	// order's activity does not exist (see orderEntry). Default 1s.
	NegativeTTL time.Duration
	// OrderTTL is how long a confirmed order read from the database is
	// answered from memory: a payment or cancellation made through
	// another instance, or an expiry, is seen within it (this instance's
	// own payments and cancellations at once). Orders in a final state
	// never change and are kept up to a minute; pending orders are never
	// kept. Default 1s.
	OrderTTL time.Duration
	// OrderCache bounds the orders kept, and apart the order ids
	// remembered as unknown. Default 10,000 of each.
	OrderCache int
	// MemoLimit bounds the buyers remembered per activity. Default 1,000,000.
	MemoLimit int
	// SnapshotLimit bounds the buyers of a sold-out activity held in
	// memory (16 bytes each). Default 1,000,000. Above it, the clicks of
	// users this instance does not remember go to Redis (each one lookup
	// in the combined grab call) instead of being answered from memory.
	SnapshotLimit int
	// EndedTTL is how long an activity stays cached after its end. Default
	// 1 minute: the cache holds the live sales, not every past one.
	EndedTTL time.Duration
	// Serialize, if set, serializes warm-ups across instances.
	Serialize Serializer
	// Admission checks the passes of the sales that have a waiting room
	// (Activity.QueueRate): package queue's Room. Without it, the grabs of
	// such a sale are refused as unavailable.
	Admission Admission
}

// Admission verifies that a pass lets uid grab in activity at now, without
// Redis (queue.Room).
type Admission interface {
	VerifyPass(activity, uid int64, pass string, now time.Time) error
}

// Service implements the use cases. It is safe for concurrent use.
type Service struct {
	store  seckill.Store
	engine *stock.Engine
	log    *slog.Logger
	cfg    Config
	stats  *Metrics

	mu        sync.RWMutex
	entries   map[int64]*entry
	negative  map[int64]time.Time
	newest    newest    // answers ids above every activity without a query each (unknown.go)
	lastSweep time.Time // of entries of ended activities
	loads     singleflight.Group
	fetches   singleflight.Group

	// The order lookups' memory (lookup.go): orders read from the
	// database, and ids found to be no order of the user who asked.
	known   *cache[int64, seckill.Order]
	unknown *cache[lookupKey, struct{}]
}

// entry is what this instance knows of one activity.
type entry struct {
	a seckill.Activity // immutable fields only; Remaining is stale

	mu      sync.RWMutex
	buyers  map[int64]int64 // memo: user -> order, as answered by Redis
	loading bool            // a rebuild runs: answer unavailable
	// snap, if not nil, holds every buyer of the sold-out activity: it
	// answers each grab without Redis. It is trusted until snapTill; then
	// one request revalidates it (checking) while the others go on
	// answering from it.
	snap     *stock.Snapshot
	snapTill time.Time
	checking atomic.Bool
	snapping bool      // a snapshot is being read
	snapNext time.Time // no snapshot is tried before then (after a failure, or too many buyers)
	// last is the highest order id the database held when an order of
	// this ended activity was last looked up while Redis did not hold it,
	// trusted until lastTill (see lookup.go).
	last     int64
	lastTill time.Time
	// resyncing: a resync waits for Redis to answer again, not before
	// resyncAfter; failed counts the grabs Redis failed meanwhile (see
	// resync.go).
	resyncing   bool
	resyncAfter time.Time
	failed      int
	// gen changes whenever what this instance knows is dropped (restock,
	// rebuild): a snapshot begun under another gen is not installed.
	gen uint64
}

// New returns a Service. metrics may be nil.
func New(store seckill.Store, engine *stock.Engine, cfg Config, log *slog.Logger, metrics *Metrics) *Service {
	if cfg.SoldOutRecheck <= 0 {
		cfg.SoldOutRecheck = time.Second
	}
	if cfg.NegativeTTL <= 0 {
		cfg.NegativeTTL = time.Second
	}
	if cfg.MemoLimit <= 0 {
		cfg.MemoLimit = 1_000_000
	}
	if cfg.SnapshotLimit <= 0 {
		cfg.SnapshotLimit = 1_000_000
	}
	if cfg.EndedTTL <= 0 {
		cfg.EndedTTL = time.Minute
	}
	if cfg.OrderTTL <= 0 {
		cfg.OrderTTL = time.Second
	}
	if cfg.OrderCache <= 0 {
		cfg.OrderCache = 10_000
	}
	if metrics == nil {
		metrics = NewMetrics(nil)
	}
	return &Service{store: store, engine: engine, log: log, cfg: cfg, stats: metrics,
		entries: map[int64]*entry{}, negative: map[int64]time.Time{}, lastSweep: time.Now(),
		known: newCache[int64, seckill.Order](cfg.OrderCache), unknown: newCache[lookupKey, struct{}](cfg.OrderCache)}
}

// CreateActivity validates and stores a new activity, then loads it into
// Redis so that it is ready before its start.
func (s *Service) CreateActivity(ctx context.Context, a *seckill.Activity) error {
	a.StartsAt, a.EndsAt = a.StartsAt.UTC().Truncate(time.Millisecond), a.EndsAt.UTC().Truncate(time.Millisecond)
	if err := a.Validate(); err != nil {
		return err
	}
	if err := s.store.CreateActivity(ctx, a); err != nil {
		return err
	}
	s.mu.Lock()
	delete(s.negative, a.ID)
	s.mu.Unlock()
	s.newest.saw(a.ID)
	if err := s.load(ctx, *a); err != nil {
		// The activity exists; the first grab will load it.
		s.log.Warn("load new activity into redis", "activity", a.ID, "err", err)
	}
	return nil
}

// CachedActivity returns activity id as this instance caches it: its
// fixed fields, without asking Redis what remains (Remaining is stale).
func (s *Service) CachedActivity(ctx context.Context, id int64) (seckill.Activity, error) {
	e, err := s.activityEntry(ctx, id)
	if err != nil {
		return seckill.Activity{}, err
	}
	return e.a, nil
}

// Activity returns an activity with its live remaining stock (from Redis,
// or from the database when Redis does not hold it).
func (s *Service) Activity(ctx context.Context, id int64) (seckill.Activity, error) {
	e, err := s.activityEntry(ctx, id)
	if err != nil {
		return seckill.Activity{}, err
	}
	a := e.a
	n, err := s.engine.Remaining(ctx, a)
	if err == nil {
		a.Remaining = n
		return a, nil
	}
	if !errors.Is(err, stock.ErrNotLoaded) {
		s.log.Warn("read remaining stock from redis", "activity", id, "err", err)
	}
	return s.store.Activity(ctx, id)
}

// Grabbed is the answer to an accepted grab.
type Grabbed struct {
	OrderID int64
	New     bool // false: the user already held this order
}

var errUnavailable = seckill.Errorf(seckill.EUNAVAILABLE, "the sale is being loaded; try again shortly")

// Grab tries to buy one unit of activity id for user uid. A user who holds
// an order is answered with it, before and after the sell-out; once this
// instance holds the sold-out activity's buyer snapshot, every click is
// answered from memory.
func (s *Service) Grab(ctx context.Context, id, uid int64) (g Grabbed, err error) {
	return s.GrabWithPass(ctx, id, uid, "")
}

// GrabWithPass is Grab with the pass of the sale's waiting room, which a
// sale that has one requires (see Config.Admission); others ignore it.
func (s *Service) GrabWithPass(ctx context.Context, id, uid int64, pass string) (g Grabbed, err error) {
	defer func() { s.stats.grab(g, err) }()
	if uid <= 0 {
		return Grabbed{}, seckill.Errorf(seckill.EINVALID, "user id must be a positive integer")
	}
	e, err := s.activityEntry(ctx, id)
	if err != nil {
		return Grabbed{}, err
	}
	now := time.Now()
	switch {
	case now.Before(e.a.StartsAt):
		return Grabbed{}, stock.ErrNotStarted
	case !now.Before(e.a.EndsAt):
		return Grabbed{}, stock.ErrEnded
	}
	if e.a.QueueRate > 0 {
		if s.cfg.Admission == nil {
			return Grabbed{}, seckill.Errorf(seckill.EUNAVAILABLE, "this sale has a waiting room, and this instance runs none")
		}
		if err := s.cfg.Admission.VerifyPass(id, uid, pass, now); err != nil {
			return Grabbed{}, err
		}
	}
	e.mu.RLock()
	snap, trusted := e.snap, now.Before(e.snapTill)
	oid, known := e.buyers[uid]
	loading := e.loading
	e.mu.RUnlock()
	if snap != nil && !trusted {
		snap = s.recheck(ctx, e, snap)
	}
	switch {
	case snap != nil:
		if oid, ok := snap.Order(uid); ok {
			return Grabbed{OrderID: oid}, nil
		}
		return Grabbed{}, stock.ErrSoldOut
	case known:
		return Grabbed{OrderID: oid}, nil
	case loading:
		return Grabbed{}, errUnavailable
	}

	res, err := s.engine.Grab(ctx, e.a, uid)
	switch {
	case errors.Is(err, stock.ErrNotLoaded):
		s.rebuild(e)
		return Grabbed{}, errUnavailable
	case errors.Is(err, stock.ErrSoldOut):
		s.soldOut(e)
		return Grabbed{}, err
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The client went away before its grab was queued: nothing happened.
		return Grabbed{}, seckill.Errorf(seckill.EUNAVAILABLE, "the request was cancelled")
	case err != nil:
		switch seckill.ErrorCode(err) {
		case seckill.EUNAVAILABLE, seckill.EOUTCOMEUNKNOWN:
			// Redis did not answer: the engine knows whether the grab may
			// have run, and says so.
			s.redisFailed(e, err)
		case seckill.EINTERNAL:
			// The script ran and its reply made no sense: it may have
			// taken a unit, so the user must ask again.
			s.log.Error("grab", "activity", id, "err", err)
			return Grabbed{}, stock.ErrOutcomeUnknown
		}
		return Grabbed{}, err
	}
	e.mu.Lock()
	if len(e.buyers) < s.cfg.MemoLimit {
		e.buyers[uid] = res.OrderID
	}
	e.mu.Unlock()
	if res.Remaining <= 0 {
		s.soldOut(e)
	}
	return Grabbed{OrderID: res.OrderID, New: res.New}, nil
}

// soldOut starts reading the buyer snapshot of an activity that Redis found
// sold out, unless one is held, being read, or not due yet. Until it is
// held, grabs go to Redis, which answers every user truthfully.
func (s *Service) soldOut(e *entry) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.snap != nil || e.snapping || time.Now().Before(e.snapNext) {
		return
	}
	e.snapping = true
	go s.snapshot(e, e.gen)
}

// snapshot reads the buyers of a sold-out activity and installs them,
// unless what this instance knew was dropped meanwhile (gen changed).
func (s *Service) snapshot(e *entry, gen uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	snap, err := s.engine.SoldOutSnapshot(ctx, e.a, s.cfg.SnapshotLimit)
	now := time.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.snapping = false
	switch {
	case e.gen != gen, errors.Is(err, stock.ErrNotSoldOut):
	case err == nil:
		e.snap, e.snapTill = snap, now.Add(s.cfg.SoldOutRecheck)
		// The snapshot knows every buyer: the memo is not needed.
		e.buyers = map[int64]int64{}
		s.stats.Snapshots.Inc()
	case errors.Is(err, stock.ErrTooManyBuyers):
		// While sold out the buyers can only become fewer: try seldom.
		e.snapNext = now.Add(time.Minute)
		s.log.Info("sold out with too many buyers to hold in memory; asking redis", "activity", e.a.ID, "limit", s.cfg.SnapshotLimit)
	default:
		e.snapNext = now.Add(s.cfg.SoldOutRecheck)
		s.log.Warn("read the buyers of a sold-out activity", "activity", e.a.ID, "err", err)
	}
}

// recheck revalidates a snapshot whose trust lapsed, in one round trip. One
// request asks; the others answer from the snapshot meanwhile. It returns
// the snapshot to answer from, or nil: dropped (stock came back, the buyers
// changed), or unknown (Redis did not answer: this request goes to Redis).
func (s *Service) recheck(ctx context.Context, e *entry, snap *stock.Snapshot) *stock.Snapshot {
	if !e.checking.CompareAndSwap(false, true) {
		return snap
	}
	defer e.checking.Store(false)
	ok, err := s.engine.SnapshotValid(ctx, snap)
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.snap != snap:
		return e.snap // replaced or dropped meanwhile
	case err != nil:
		return nil
	case ok:
		e.snapTill = time.Now().Add(s.cfg.SoldOutRecheck)
		return snap
	}
	e.forget()
	return nil
}

// forget drops what the entry knows of buyers and stock. e.mu is held.
func (e *entry) forget() {
	e.gen++
	e.snap, e.snapTill, e.snapNext = nil, time.Time{}, time.Time{}
	clear(e.buyers)
}

// Restocked drops what this instance knows of an activity's buyers and
// stock (stock came back): the next grabs ask Redis.
func (s *Service) Restocked(id int64) {
	s.mu.RLock()
	e := s.entries[id]
	s.mu.RUnlock()
	if e == nil {
		return
	}
	e.mu.Lock()
	// The compensated buyer may have been remembered; forget them all
	// rather than answer a stale order: the memo refills from Redis.
	e.forget()
	e.mu.Unlock()
}

// entry returns the cached activity, fetching it from the database once.
func (s *Service) entry(ctx context.Context, id int64) (*entry, error) {
	if id <= 0 {
		return nil, seckill.Errorf(seckill.ENOTFOUND, "activity %d not found", id)
	}
	s.mu.RLock()
	e, neg := s.entries[id], s.negative[id]
	s.mu.RUnlock()
	if e != nil {
		return e, nil
	}
	if time.Now().Before(neg) {
		return nil, seckill.Errorf(seckill.ENOTFOUND, "activity %d not found", id)
	}
	v, err, _ := s.fetches.Do(strconv.FormatInt(id, 10), func() (any, error) {
		a, err := s.store.Activity(ctx, id)
		if err != nil {
			if seckill.ErrorCode(err) == seckill.ENOTFOUND {
				s.mu.Lock()
				if len(s.negative) > 100_000 {
					clear(s.negative)
				}
				s.negative[id] = time.Now().Add(s.cfg.NegativeTTL)
				s.mu.Unlock()
			}
			return nil, err
		}
		s.newest.saw(id)
		s.mu.Lock()
		defer s.mu.Unlock()
		if e := s.entries[id]; e != nil {
			return e, nil
		}
		now := time.Now()
		if now.Sub(s.lastSweep) >= s.cfg.EndedTTL {
			s.sweepLocked(now)
		}
		e := &entry{a: a, buyers: map[int64]int64{}}
		s.entries[id] = e
		return e, nil
	})
	if err != nil {
		if seckill.ErrorCode(err) == seckill.EINTERNAL {
			s.log.Error("read activity", "activity", id, "err", err)
			return nil, seckill.Errorf(seckill.EUNAVAILABLE, "the database cannot be reached right now")
		}
		return nil, err
	}
	return v.(*entry), nil
}

// sweepLocked drops the entries of activities that ended more than
// EndedTTL ago: the map holds the live sales, not every sale ever seen. An
// activity asked for again is read from the database again. s.mu is held.
func (s *Service) sweepLocked(now time.Time) {
	s.lastSweep = now
	for id, e := range s.entries {
		if now.Sub(e.a.EndsAt) > s.cfg.EndedTTL {
			delete(s.entries, id)
		}
	}
}

// rebuild loads an activity that Redis lost, in the background; grabs for
// it answer unavailable meanwhile, not from what this instance remembers of
// the lost state.
func (s *Service) rebuild(e *entry) {
	id := e.a.ID
	e.mu.Lock()
	if e.loading {
		e.mu.Unlock()
		return
	}
	e.loading = true
	e.forget()
	e.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := s.load(ctx, e.a); err != nil {
			s.log.Error("rebuild activity in redis", "activity", id, "err", err)
		}
		e.mu.Lock()
		e.loading = false
		e.forget()
		e.mu.Unlock()
	}()
}

// load puts an activity into Redis from the database unless Redis holds it:
// remaining stock, the buyers, and the receipts of returned units. One load per activity
// at a time in this process, and across instances with Serialize.
func (s *Service) load(ctx context.Context, known seckill.Activity) error {
	id := known.ID
	_, err, _ := s.loads.Do(strconv.FormatInt(id, 10), func() (any, error) {
		do := func(ctx context.Context) error {
			if ok, err := s.engine.Loaded(ctx, known); err != nil || ok {
				return err
			}
			// Read after checking, under the lock: the snapshot is as fresh
			// as it can be. One snapshot: the stock, the users who may not
			// grab again, the returns it reflects (their receipts), and the
			// last order id (failed orders took ids too; none may be issued
			// again).
			l, err := s.store.Load(ctx, id)
			if err != nil {
				return err
			}
			a := l.Activity
			loaded, err := s.engine.Load(ctx, a, l.Buyers, stock.OrdersAfter(l.LastOrderID), stock.ReturnedOrders(l.Returned))
			if err != nil || !loaded {
				return err
			}
			s.log.Info("activity loaded into redis", "activity", id, "remaining", a.Remaining, "buyers", len(l.Buyers))
			s.stats.Loads.Inc()
			// Orders may have been committed, and units returned, between
			// the snapshot and the load: read again and tell Redis what it
			// missed (both idempotent). A return whose Redis half found the
			// activity not loaded counts on this. Later commits reconcile
			// themselves; later returns reach Redis by Engine.Return.
			again, err := s.store.Load(ctx, id)
			if err != nil {
				return err
			}
			known := make(map[int64]bool, len(l.Returned))
			for _, oid := range l.Returned {
				known[oid] = true
			}
			for _, oid := range again.Returned {
				if known[oid] {
					continue
				}
				o, err := s.store.Order(ctx, oid)
				if err != nil {
					return err
				}
				r := seckill.Return{OrderID: oid, ActivityID: id, UserID: o.UserID, Status: o.Status, Rebuy: a.Rebuy,
					Buckets: a.Buckets, ReturnedAt: o.ClosedAt}
				if _, err := s.engine.Return(ctx, r); err != nil {
					return err
				}
			}
			if n, err := s.engine.Reconcile(ctx, a, again.Buyers); err != nil {
				return err
			} else if n > 0 {
				s.log.Warn("orders committed during the load reconciled", "activity", id, "units", n)
			}
			return nil
		}
		if s.cfg.Serialize == nil {
			return nil, do(ctx)
		}
		return nil, s.cfg.Serialize(ctx, s.engine.Prefix()+":{a"+strconv.FormatInt(id, 10)+"}:load", do)
	})
	return err
}

// WarmUp loads every activity that has not ended into Redis.
func (s *Service) WarmUp(ctx context.Context) error {
	acts, err := s.store.Activities(ctx, time.Now())
	if err != nil {
		return err
	}
	var errs []error
	for _, a := range acts {
		if err := s.load(ctx, a); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// memoTTL bounds how long a remembered buyer is trusted: a restock message
// missed while the subscription reconnected would otherwise leave a failed
// order's buyer remembered for good. It concerns the memo only (activities
// with stock left): a sold-out activity's snapshot is revalidated every
// SoldOutRecheck instead.
const memoTTL = 30 * time.Second

// Run listens for restock announcements until ctx ends; it also lapses the
// memo (memoTTL) and drops the cache entries of ended activities.
func (s *Service) Run(ctx context.Context) error {
	sub := s.engine.Client().Subscribe(ctx, s.engine.EventsChannel())
	defer sub.Close()
	ch := sub.Channel(redis.WithChannelHealthCheckInterval(5 * time.Second))
	forget := time.NewTicker(memoTTL)
	defer forget.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-forget.C:
			s.mu.Lock()
			s.sweepLocked(time.Now())
			for _, e := range s.entries {
				e.mu.Lock()
				clear(e.buyers)
				e.mu.Unlock()
			}
			s.mu.Unlock()
		case m, ok := <-ch:
			if !ok {
				return nil
			}
			if id, err := strconv.ParseInt(m.Payload, 10, 64); err == nil {
				s.Restocked(id)
			}
		}
	}
}
