// Package sale is the application service of a flash sale: it answers the
// use cases (create an activity, grab, ask for an order) by combining the
// database (seckill.Store), the Redis stock engine and the order id
// generator, and keeps the in-process state that spares Redis and the
// database the bulk of a crowd: an activity cache, sold-out flags and the
// buyers this instance has answered.
package sale

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/singleflight"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/idgen"
	"github.com/seckilldev/seckill/stock"
)

// IDs issues order ids (idgen.Generator).
type IDs interface {
	Next() (int64, error)
}

// Serializer runs fn while holding the cross-instance lock named key, so
// that several instances do not rebuild the same activity at once. Loading
// is correct without it (the last step is load-if-absent); it saves the
// duplicate database reads.
type Serializer func(ctx context.Context, key string, fn func(ctx context.Context) error) error

// Config tunes a Service. Zero values take the defaults.
type Config struct {
	// SoldOutRecheck bounds how long a sold-out flag is trusted without
	// asking Redis, in case a restock message was missed. Default 1s.
	SoldOutRecheck time.Duration
	// NegativeTTL is how long an unknown activity id is remembered as
	// unknown. Default 1s.
	NegativeTTL time.Duration
	// MemoLimit bounds the buyers remembered per activity. Default 1,000,000.
	MemoLimit int
	// Serialize, if set, serializes warm-ups across instances.
	Serialize Serializer
}

// Service implements the use cases. It is safe for concurrent use.
type Service struct {
	store  seckill.Store
	engine *stock.Engine
	ids    IDs
	log    *slog.Logger
	cfg    Config
	stats  *Metrics

	mu       sync.RWMutex
	entries  map[int64]*entry
	negative map[int64]time.Time
	loads    singleflight.Group
	fetches  singleflight.Group
}

// entry is what this instance knows of one activity.
type entry struct {
	a seckill.Activity // immutable fields only; Remaining is stale

	mu          sync.RWMutex
	soldOutTill time.Time       // sold out, trusted until then
	buyers      map[int64]int64 // user -> order, as answered by Redis
	loading     bool            // a rebuild runs: answer unavailable
}

// New returns a Service. metrics may be nil.
func New(store seckill.Store, engine *stock.Engine, ids IDs, cfg Config, log *slog.Logger, metrics *Metrics) *Service {
	if cfg.SoldOutRecheck <= 0 {
		cfg.SoldOutRecheck = time.Second
	}
	if cfg.NegativeTTL <= 0 {
		cfg.NegativeTTL = time.Second
	}
	if cfg.MemoLimit <= 0 {
		cfg.MemoLimit = 1_000_000
	}
	if metrics == nil {
		metrics = NewMetrics(nil)
	}
	return &Service{store: store, engine: engine, ids: ids, log: log, cfg: cfg, stats: metrics,
		entries: map[int64]*entry{}, negative: map[int64]time.Time{}}
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
	if err := s.load(ctx, a.ID); err != nil {
		// The activity exists; the first grab will load it.
		s.log.Warn("load new activity into redis", "activity", a.ID, "err", err)
	}
	return nil
}

// Activity returns an activity with its live remaining stock (from Redis,
// or from the database when Redis does not hold it).
func (s *Service) Activity(ctx context.Context, id int64) (seckill.Activity, error) {
	e, err := s.entry(ctx, id)
	if err != nil {
		return seckill.Activity{}, err
	}
	a := e.a
	n, err := s.engine.Remaining(ctx, id)
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

// Grab tries to buy one unit of activity id for user uid.
func (s *Service) Grab(ctx context.Context, id, uid int64) (g Grabbed, err error) {
	defer func() { s.stats.grab(g, err) }()
	if uid <= 0 {
		return Grabbed{}, seckill.Errorf(seckill.EINVALID, "user id must be a positive integer")
	}
	e, err := s.entry(ctx, id)
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
	e.mu.RLock()
	oid, known := e.buyers[uid]
	soldOut, loading := now.Before(e.soldOutTill), e.loading
	e.mu.RUnlock()
	switch {
	case known:
		return Grabbed{OrderID: oid}, nil
	case soldOut:
		return Grabbed{}, stock.ErrSoldOut
	case loading:
		return Grabbed{}, errUnavailable
	}

	oid, err = s.ids.Next()
	if err != nil {
		s.log.Error("order id", "err", err)
		return Grabbed{}, seckill.Errorf(seckill.EUNAVAILABLE, "cannot issue order ids right now")
	}
	res, err := s.engine.Grab(ctx, id, uid, oid)
	switch {
	case errors.Is(err, stock.ErrNotLoaded):
		s.rebuild(id)
		return Grabbed{}, errUnavailable
	case errors.Is(err, stock.ErrSoldOut):
		s.markSoldOut(e)
		return Grabbed{}, err
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The client went away before its grab was queued: nothing happened.
		return Grabbed{}, seckill.Errorf(seckill.EUNAVAILABLE, "the request was cancelled")
	case seckill.ErrorCode(err) == seckill.EINTERNAL:
		s.log.Error("grab", "activity", id, "err", err)
		return Grabbed{}, seckill.Errorf(seckill.EUNAVAILABLE, "the sale cannot be reached right now")
	case err != nil:
		return Grabbed{}, err
	}
	e.mu.Lock()
	if len(e.buyers) < s.cfg.MemoLimit {
		e.buyers[uid] = res.OrderID
	}
	e.mu.Unlock()
	if res.Remaining <= 0 {
		s.markSoldOut(e)
	}
	return Grabbed{OrderID: res.OrderID, New: res.New}, nil
}

func (s *Service) markSoldOut(e *entry) {
	e.mu.Lock()
	e.soldOutTill = time.Now().Add(s.cfg.SoldOutRecheck)
	e.mu.Unlock()
}

// Restocked clears the sold-out flag of an activity (stock came back).
func (s *Service) Restocked(id int64) {
	s.mu.RLock()
	e := s.entries[id]
	s.mu.RUnlock()
	if e == nil {
		return
	}
	e.mu.Lock()
	e.soldOutTill = time.Time{}
	// The compensated buyer may have been remembered; forget them all
	// rather than answer a stale order: the memo refills from Redis.
	clear(e.buyers)
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
		s.mu.Lock()
		defer s.mu.Unlock()
		if e := s.entries[id]; e != nil {
			return e, nil
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

// rebuild loads an activity that Redis lost, in the background; grabs for
// it answer unavailable meanwhile.
func (s *Service) rebuild(id int64) {
	s.mu.RLock()
	e := s.entries[id]
	s.mu.RUnlock()
	e.mu.Lock()
	if e.loading {
		e.mu.Unlock()
		return
	}
	e.loading = true
	e.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := s.load(ctx, id); err != nil {
			s.log.Error("rebuild activity in redis", "activity", id, "err", err)
		}
		e.mu.Lock()
		e.loading = false
		clear(e.buyers)
		e.soldOutTill = time.Time{}
		e.mu.Unlock()
	}()
}

// load puts an activity into Redis from the database unless Redis holds it:
// remaining stock and the buyers of confirmed orders. One load per activity
// at a time in this process, and across instances with Serialize.
func (s *Service) load(ctx context.Context, id int64) error {
	_, err, _ := s.loads.Do(strconv.FormatInt(id, 10), func() (any, error) {
		do := func(ctx context.Context) error {
			if ok, err := s.engine.Loaded(ctx, id); err != nil || ok {
				return err
			}
			// Read after checking, under the lock: the snapshot is as fresh
			// as it can be.
			a, err := s.store.Activity(ctx, id)
			if err != nil {
				return err
			}
			buyers, err := s.store.Buyers(ctx, id)
			if err != nil {
				return err
			}
			loaded, err := s.engine.Load(ctx, a, buyers)
			if err != nil || !loaded {
				return err
			}
			s.log.Info("activity loaded into redis", "activity", id, "remaining", a.Remaining, "buyers", len(buyers))
			s.stats.Loads.Inc()
			// A worker may have committed orders between the snapshot and
			// the load: read the buyers again and tell Redis of any it
			// missed (idempotent). Later commits reconcile themselves.
			again, err := s.store.Buyers(ctx, id)
			if err != nil {
				return err
			}
			if n, err := s.engine.Reconcile(ctx, id, again); err != nil {
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
		if err := s.load(ctx, a.ID); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Order returns order oid as the user uid may see it (uid 0: the admin may
// see any order). Orders of other users are not found.
func (s *Service) Order(ctx context.Context, oid, uid int64) (seckill.Order, error) {
	notFound := seckill.Errorf(seckill.ENOTFOUND, "order %d not found", oid)
	if oid <= 0 {
		return seckill.Order{}, notFound
	}
	o, err := s.store.Order(ctx, oid)
	switch {
	case err == nil:
		if uid != 0 && o.UserID != uid {
			return seckill.Order{}, notFound
		}
		return o, nil
	case seckill.ErrorCode(err) != seckill.ENOTFOUND:
		s.log.Error("read order", "order", oid, "err", err)
		return seckill.Order{}, seckill.Errorf(seckill.EUNAVAILABLE, "the database cannot be reached right now")
	}
	// Not in the database (yet): pending if Redis knows it. Look in the
	// activities that were open when the id was issued.
	t := idgen.Time(oid)
	acts, err := s.store.Activities(ctx, t.Add(-time.Minute))
	if err != nil {
		return seckill.Order{}, seckill.Errorf(seckill.EUNAVAILABLE, "the database cannot be reached right now")
	}
	for _, a := range acts {
		if t.Before(a.StartsAt.Add(-time.Minute)) {
			continue
		}
		owner, ok, err := s.engine.PendingOrder(ctx, a.ID, oid, uid, t)
		if err != nil {
			s.log.Warn("look up pending order", "order", oid, "err", err)
			return seckill.Order{}, seckill.Errorf(seckill.EUNAVAILABLE, "redis cannot be reached right now")
		}
		if ok {
			return seckill.Order{ID: oid, ActivityID: a.ID, UserID: owner, Status: seckill.OrderPending, CreatedAt: t}, nil
		}
	}
	return seckill.Order{}, notFound
}

// memoTTL bounds how long a remembered buyer is trusted: a restock message
// missed while the subscription reconnected would otherwise leave a failed
// order's buyer remembered for good.
const memoTTL = 30 * time.Second

// Run listens for restock announcements until ctx ends.
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
			s.mu.RLock()
			for _, e := range s.entries {
				e.mu.Lock()
				clear(e.buyers)
				e.mu.Unlock()
			}
			s.mu.RUnlock()
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
