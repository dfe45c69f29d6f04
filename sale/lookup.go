package sale

import (
	"context"
	"strconv"
	"time"

	"github.com/seckilldev/seckill"
)

// Order lookups that a crowd of made-up ids cannot turn into database
// load. An order id names its activity and, in its local part, the order's
// place in the activity's sequence (seckill.OrderID), and Redis holds what
// the database does not know yet: the activity's last issued id (the meta's
// seq) and each order not yet written (a buyer mark, a stream entry). So a
// lookup asks this instance's memory first, then Redis (one round trip),
// and the database only for an id that Redis issued:
//
//   - an id whose activity does not exist, or that lies outside its sale
//     window, or beyond the last id Redis issued, is no order: answered
//     without a database query of its own (see orderEntry and lastOrder
//     for the few they share), and not remembered (the next grab may
//     issue the id just beyond the last);
//   - an id Redis issued is read from the database once (a primary-key
//     read): found, it is kept (OrderTTL for a confirmed order, a minute
//     for a final state, which never changes); held by Redis only, it is
//     pending, never kept; neither, it is remembered as no order of the
//     caller for NegativeTTL.
//
// Why a pending order is never answered 404: grab.lua issues an id, raises
// seq and records the order (buyer mark, stream entry) in one atomic step
// before the grab is answered 202, and the worker drops either only after
// the database holds the order. Redis is read before the database, so an
// order Redis did not hold is in the database by the time it is read, or
// was never the caller's. An id that Redis issued and that is no order of
// the caller's stays so (ids only grow), hence the negative memory.

// finalTTL is how long an order in a final state is kept: it never changes,
// and the bound only lets the memory follow the orders asked for.
const finalTTL = time.Minute

// lookupKey is an order id as one caller asked for it (uid 0: an admin).
type lookupKey struct{ oid, uid int64 }

// Order returns order oid as the user uid may see it (uid 0: the admin may
// see any order). Orders of other users are not found. It costs at most
// one Redis round trip and one read of the database by primary key, and
// none for an id that is no order (see above).
func (s *Service) Order(ctx context.Context, oid, uid int64) (seckill.Order, error) {
	notFound := seckill.Errorf(seckill.ENOTFOUND, "order %d not found", oid)
	if oid <= 0 || seckill.OrderLocal(oid) == 0 {
		return seckill.Order{}, notFound
	}
	now := time.Now()
	if o, ok := s.known.get(oid, now); ok {
		return visible(o, uid, notFound)
	}
	key := lookupKey{oid, uid}
	if _, ok := s.unknown.get(key, now); ok {
		return seckill.Order{}, notFound
	}
	e, err := s.orderEntry(ctx, seckill.OrderActivity(oid))
	switch {
	case seckill.ErrorCode(err) == seckill.ENOTFOUND:
		return seckill.Order{}, notFound
	case err != nil:
		return seckill.Order{}, err
	case !possible(e.a, oid):
		return seckill.Order{}, notFound
	}
	gen, unknownGen := s.known.generation(), s.unknown.generation()
	h, err := s.engine.FindOrder(ctx, e.a, oid, uid)
	switch {
	case err != nil:
		// The database still answers for the orders it holds.
		s.log.Warn("look up order in redis", "order", oid, "err", err)
		o, err := s.stored(ctx, oid, gen)
		if seckill.ErrorCode(err) == seckill.ENOTFOUND {
			return seckill.Order{}, seckill.Errorf(seckill.EUNAVAILABLE, "redis cannot be reached right now")
		} else if err != nil {
			return seckill.Order{}, err
		}
		return visible(o, uid, notFound)
	case h.Loaded && !h.Issued:
		return seckill.Order{}, notFound
	case !h.Loaded && !now.Before(e.a.EndsAt):
		// A past sale that Redis no longer holds: the database holds all
		// its orders, and none above the last.
		if last, err := s.lastOrder(ctx, e, now); err == nil && oid > last {
			return seckill.Order{}, notFound
		}
	}
	o, err := s.stored(ctx, oid, gen)
	switch {
	case err == nil:
		return visible(o, uid, notFound)
	case seckill.ErrorCode(err) != seckill.ENOTFOUND:
		return seckill.Order{}, err
	case h.Owner != 0:
		return seckill.Order{ID: oid, ActivityID: e.a.ID, UserID: h.Owner, Status: seckill.OrderPending,
			CreatedAt: seckill.OrderTime(e.a.StartsAt, oid)}, nil
	}
	s.unknown.put(key, struct{}{}, now.Add(s.cfg.NegativeTTL), unknownGen)
	return seckill.Order{}, notFound
}

// visible returns o if user uid (0: an admin) may see it, else notFound.
func visible(o seckill.Order, uid int64, notFound error) (seckill.Order, error) {
	if uid != 0 && o.UserID != uid {
		return seckill.Order{}, notFound
	}
	return o, nil
}

// stored reads an order from the database, and keeps it unless this
// instance changed it after gen was taken.
func (s *Service) stored(ctx context.Context, oid int64, gen uint64) (seckill.Order, error) {
	o, err := s.store.Order(ctx, oid)
	switch {
	case err == nil:
		s.keep(o, gen)
		return o, nil
	case seckill.ErrorCode(err) == seckill.ENOTFOUND:
		return o, err
	}
	s.log.Error("read order", "order", oid, "err", err)
	return seckill.Order{}, seckill.Errorf(seckill.EUNAVAILABLE, "the database cannot be reached right now")
}

// keep remembers an order the database answered.
func (s *Service) keep(o seckill.Order, gen uint64) {
	ttl := finalTTL
	switch o.Status {
	case seckill.OrderConfirmed:
		ttl = s.cfg.OrderTTL
	case seckill.OrderPending:
		return
	}
	s.known.put(o.ID, o, time.Now().Add(ttl), gen)
}

// changed records that this instance asked the database to change order
// oid for user uid, and what it answered: what this instance remembers of
// the order goes, a lookup under way keeps nothing it read before, and the
// order as the change left it is kept. The buyer reads their own payment or
// cancellation at once.
func (s *Service) changed(oid, uid int64, o seckill.Order, err error) {
	s.known.drop(oid)
	s.unknown.drop(lookupKey{oid, uid})
	if err == nil {
		s.keep(o, s.known.generation())
	}
}

// orderEntry is entry for an order lookup. An order exists only of an
// activity that Redis held when the order was grabbed, and Redis lets go
// of an activity only once it ended, its retention passed and its orders
// are written. So an activity above every one this instance knows of and
// absent from Redis is looked for in a listing that began up to
// NegativeTTL ago, not a new one: a flood of made-up ids costs one
// listing per NegativeTTL, and Redis one EXISTS each. (A sale created,
// ended and retired within that time is the one this misses.)
func (s *Service) orderEntry(ctx context.Context, id int64) (*entry, error) {
	s.mu.RLock()
	e := s.entries[id]
	s.mu.RUnlock()
	switch {
	case e != nil:
		return e, nil
	case id <= s.newest.id.Load():
		return s.entry(ctx, id)
	}
	loaded, err := s.engine.Present(ctx, id)
	switch {
	case err == nil && loaded:
		return s.entry(ctx, id)
	case err == nil:
		return s.entrySince(ctx, id, time.Now().Add(-s.cfg.NegativeTTL))
	}
	return s.activityEntry(ctx, id)
}

// lastOrder returns the highest order id the database holds for the ended
// activity of e, read at most once per NegativeTTL.
func (s *Service) lastOrder(ctx context.Context, e *entry, now time.Time) (int64, error) {
	e.mu.RLock()
	last, till := e.last, e.lastTill
	e.mu.RUnlock()
	if now.Before(till) {
		return last, nil
	}
	v, err, _ := s.fetches.Do("last:"+strconv.FormatInt(e.a.ID, 10), func() (any, error) {
		return s.store.LastOrderID(ctx, e.a.ID)
	})
	if err != nil {
		return 0, err
	}
	e.mu.Lock()
	e.last, e.lastTill = v.(int64), now.Add(s.cfg.NegativeTTL)
	e.mu.Unlock()
	return v.(int64), nil
}

// possible reports whether grab.lua can have issued oid for a: its time
// lies within the sale window, plus what borrowing ids can add (one
// millisecond per 8 orders of a bucket, a bucket's ids being one in
// Buckets: a margin of Stock x Buckets milliseconds covers 8 times the
// stock in orders in one bucket, failed ones given back included).
func possible(a seckill.Activity, oid int64) bool {
	ms := seckill.OrderLocal(oid) >> seckill.OrderSeqBits
	return ms <= a.EndsAt.Sub(a.StartsAt).Milliseconds()+a.Stock*int64(a.BucketCount())
}
