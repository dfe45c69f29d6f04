package compare

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill/lock"
)

// grabDB is db-only: the database alone. UPDATE ... WHERE remaining > 0
// takes the item's row lock, so the check for an existing order and the
// insert that follow run one buyer at a time per item, until commit.
func (s *Sale) grabDB(ctx context.Context, it *item, uid int64) (reply, error) {
	b := s.b
	tx, err := b.db.BeginTx(ctx, b.d.txOptions)
	if err != nil {
		return reply{}, err
	}
	res, err := tx.ExecContext(ctx, b.d.q(qTakeUnit), it.id)
	var n int64
	if err == nil {
		n, err = res.RowsAffected()
	}
	if err != nil || n == 0 {
		// The transaction ends before anything else is asked: SQLite's
		// pool has one connection.
		_ = tx.Rollback()
		if err != nil {
			return reply{}, err
		}
		// Sold out; a buyer who asks again is shown the order.
		oid, err := userOrder(ctx, b.db, b.d, it.id, uid)
		switch {
		case err != nil:
			return reply{}, err
		case oid == 0:
			return reply{}, errSoldOut
		}
		return reply{order: oid}, nil
	}
	oid, err := userOrder(ctx, tx, b.d, it.id, uid)
	if err != nil || oid != 0 {
		_ = tx.Rollback() // gives the unit back
		return reply{order: oid}, err
	}
	if oid, err = b.ids.Next(); err == nil {
		_, err = tx.ExecContext(ctx, b.d.q(qInsertOrder), oid, it.id, uid)
	}
	if err != nil {
		_ = tx.Rollback()
		return reply{}, err
	}
	if err := tx.Commit(); err != nil {
		return reply{}, err
	}
	return reply{order: oid, new: true}, nil
}

// lock takes the named lock with a fixed lease, waiting at most LockWait;
// a wait given up is errBusy.
func (s *Sale) lock(ctx context.Context, name string) (*lock.Lock, error) {
	wctx, cancel := context.WithTimeout(ctx, s.b.cfg.LockWait)
	defer cancel()
	l, err := s.b.locks.Lock(wctx, name, lock.WithTTL(s.b.cfg.LockTTL))
	if errors.Is(err, lock.ErrNotObtained) && ctx.Err() == nil {
		s.busy.Add(1)
		return nil, errBusy
	}
	return l, err
}

func (s *Sale) unlock(ctx context.Context, l *lock.Lock) {
	err := l.Unlock(context.WithoutCancel(ctx))
	if errors.Is(err, lock.ErrNotHeld) {
		s.expired.Add(1)
	} else if err != nil {
		// the lease ends the lock anyway
		s.b.cfg.Log.Warn("unlock failed", "lock", l.Key(), "err", err)
	}
}

// peek reads the item's remaining stock and the user's order (0: none) in
// one round trip. Nothing keeps them true afterwards except a lock.
func (s *Sale) peek(ctx context.Context, it *item, uid int64) (remaining, order int64, err error) {
	pipe := s.b.rdb.Pipeline()
	stock := pipe.Get(ctx, it.keyStock)
	buyer := pipe.HGet(ctx, it.keyBuyers, strconv.FormatInt(uid, 10))
	_, err = pipe.Exec(ctx)
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, 0, err
	}
	if remaining, err = stock.Int64(); err != nil {
		return 0, 0, fmt.Errorf("compare: stock of item %d: %w", it.id, err)
	}
	if order, err = buyer.Int64(); errors.Is(err, redis.Nil) {
		err = nil
	}
	return remaining, order, err
}

// record writes the order and the item's stock in one transaction. With a
// fencing token (fence > 0) the write is refused unless the item still has
// stock and no newer lock holder has written; without one the database
// follows what Redis decided.
func (s *Sale) record(ctx context.Context, it *item, uid, oid, fence int64) error {
	b := s.b
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	var n int64 = 1
	if fence > 0 {
		res, err := tx.ExecContext(ctx, b.d.q(qTakeUnitFenced), fence, it.id, fence)
		if err == nil {
			n, err = res.RowsAffected()
		}
		if err != nil {
			_ = tx.Rollback()
			return err
		}
	} else if _, err := tx.ExecContext(ctx, b.d.q(qMirrorUnit), it.id); err != nil {
		_ = tx.Rollback()
		return err
	}
	if n == 0 {
		_ = tx.Rollback()
		return s.refused(ctx, it, fence)
	}
	if _, err := tx.ExecContext(ctx, b.d.q(qInsertOrder), oid, it.id, uid); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// refused explains a fenced write that changed nothing: the database had
// no stock left, or a newer holder of the lock had written.
func (s *Sale) refused(ctx context.Context, it *item, fence int64) error {
	var left, last int64
	if err := s.b.db.QueryRowContext(ctx, s.b.d.q(qItemState), it.id).Scan(&left, &last); err != nil {
		return err
	}
	if left <= 0 {
		return errSoldOut
	}
	s.fenced.Add(1)
	if s.fenced.Load() <= 5 {
		s.b.cfg.Log.Warn("write refused: stale fencing token", "item", it.id, "token", fence, "last", last)
	}
	return errBusy
}

// grabLocked is global-lock and activity-lock: under the lock, read stock
// and buyer, write the order (fenced: activity-lock), then decrement and
// record the buyer in Redis.
func (s *Sale) grabLocked(ctx context.Context, it *item, uid int64, name string, fenced bool) (reply, error) {
	l, err := s.lock(ctx, name)
	if err != nil {
		return reply{}, err
	}
	defer s.unlock(ctx, l)
	left, oid, err := s.peek(ctx, it, uid)
	switch {
	case err != nil:
		return reply{}, err
	case oid != 0:
		return reply{order: oid}, nil
	case left <= 0:
		return reply{}, errSoldOut
	}
	if oid, err = s.b.ids.Next(); err != nil {
		return reply{}, err
	}
	var fence int64
	if fenced {
		fence = l.Token()
	}
	if err := s.record(ctx, it, uid, oid, fence); err != nil {
		return reply{}, err
	}
	pipe := s.b.rdb.TxPipeline()
	pipe.Decr(ctx, it.keyStock)
	pipe.HSet(ctx, it.keyBuyers, strconv.FormatInt(uid, 10), oid)
	if _, err := pipe.Exec(ctx); err != nil {
		return reply{}, err
	}
	return reply{order: oid, new: true}, nil
}

// grabUserLock is user-lock, as the naive Java code has it: the lock keeps
// one user's clicks apart, but the stock is read, and later written back
// minus one, while other users' grabs do the same.
func (s *Sale) grabUserLock(ctx context.Context, it *item, uid int64) (reply, error) {
	l, err := s.lock(ctx, "user:"+strconv.FormatInt(uid, 10))
	if err != nil {
		return reply{}, err
	}
	defer s.unlock(ctx, l)
	left, oid, err := s.peek(ctx, it, uid)
	switch {
	case err != nil:
		return reply{}, err
	case oid != 0:
		return reply{order: oid}, nil
	case left <= 0:
		return reply{}, errSoldOut
	}
	if err := s.b.rdb.Set(ctx, it.keyStock, left-1, 0).Err(); err != nil {
		return reply{}, err
	}
	if oid, err = s.b.ids.Next(); err != nil {
		return reply{}, err
	}
	if err := s.record(ctx, it, uid, oid, 0); err != nil {
		return reply{}, err
	}
	return s.recordBuyer(ctx, it, uid, oid)
}

// grabNaive is naive: no lock. GET the stock; if there is some, write the
// order, then DECR (the seeds' "order first, then decrement", without
// their lock); the buyer is checked with the GET and recorded last.
// Everything between the GET and the DECR is a window for other buyers of
// the item to see the same stock, and between the check and the record
// for the same user's second click.
func (s *Sale) grabNaive(ctx context.Context, it *item, uid int64) (reply, error) {
	left, oid, err := s.peek(ctx, it, uid)
	switch {
	case err != nil:
		return reply{}, err
	case oid != 0:
		return reply{order: oid}, nil
	case left <= 0:
		return reply{}, errSoldOut
	}
	if oid, err = s.b.ids.Next(); err != nil {
		return reply{}, err
	}
	if err := s.record(ctx, it, uid, oid, 0); err != nil {
		return reply{}, err
	}
	if err := s.b.rdb.Decr(ctx, it.keyStock).Err(); err != nil {
		return reply{}, err
	}
	return s.recordBuyer(ctx, it, uid, oid)
}

// recordBuyer marks the user as a buyer of the item in Redis.
func (s *Sale) recordBuyer(ctx context.Context, it *item, uid, oid int64) (reply, error) {
	if err := s.b.rdb.HSet(ctx, it.keyBuyers, strconv.FormatInt(uid, 10), oid).Err(); err != nil {
		return reply{}, err
	}
	return reply{order: oid, new: true}, nil
}
