package sqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/seckilldev/seckill"
)

// Engine is what New needs of an engine.
type Engine struct {
	// Name prefixes errors: "postgres", "mysql", "sqlite".
	Name    string
	Dialect Dialect
	// DB runs statements outside a transaction (each one commits alone).
	DB Conn
	// InTx runs fn in a read-write transaction at READ COMMITTED or
	// stronger, committed if fn returns nil.
	InTx func(ctx context.Context, fn func(Conn) error) error
	// Snapshot runs fn in a transaction whose reads all see one snapshot.
	Snapshot func(ctx context.Context, fn func(Conn) error) error
	// Retryable reports the errors after which rerunning a transaction can
	// succeed (deadlock, serialization failure, busy database).
	Retryable func(error) bool
}

// Store implements the methods of seckill.Store whose SQL the engines share:
// the reads, and the order lifecycle after ApplyOrders (pay, cancel, expire,
// the returns outbox). Each engine embeds one, made by New.
//
// Every state change is one conditional UPDATE (... WHERE status =
// 'confirmed' AND ...), which the database applies to the row as it is when
// the statement runs; what a caller is told is read afterwards, from the
// row as the change left it. Transactions that change stock lock the
// activity rows first, in id order, as ApplyOrders does, and the order rows
// after them, so that no two wait for each other in a cycle.
type Store struct {
	name      string
	d         Dialect
	db        Conn
	inTx      func(ctx context.Context, fn func(Conn) error) error
	snapshot  func(ctx context.Context, fn func(Conn) error) error
	retryable func(error) bool
}

// New returns the shared part of an engine's store.
func New(e Engine) *Store {
	return &Store{name: e.Name, d: e.Dialect, db: e.Dialect.conn(e.DB),
		inTx: func(ctx context.Context, fn func(Conn) error) error {
			return e.InTx(ctx, func(c Conn) error { return fn(e.Dialect.conn(c)) })
		},
		snapshot: func(ctx context.Context, fn func(Conn) error) error {
			return e.Snapshot(ctx, func(c Conn) error { return fn(e.Dialect.conn(c)) })
		},
		retryable: e.Retryable}
}

// tx runs fn in a transaction, rerun while its error is retryable.
func (s *Store) tx(ctx context.Context, fn func(Conn) error) error {
	return Retry(ctx, s.retryable, func() error { return s.inTx(ctx, fn) })
}

func (s *Store) errorf(format string, args ...any) error {
	return fmt.Errorf(s.name+": "+format, args...)
}

// Limits of the lifecycle's arguments.
const (
	// MaxRef bounds a payment reference and an idempotency key (bytes).
	MaxRef = 128
	// MaxFenceName bounds a fence's name (bytes).
	MaxFenceName = 64
)

// activityColumns are the columns scanActivity reads, in its order.
const activityColumns = `id, name, stock, remaining, starts_at, ends_at, pay_within_ms, rebuy, buckets, queue_rate, queue_hold`

func scanActivity(row Row) (seckill.Activity, error) {
	var a seckill.Activity
	var payMS int64
	err := row.Scan(&a.ID, &a.Name, &a.Stock, &a.Remaining, TimeDest(&a.StartsAt), TimeDest(&a.EndsAt), &payMS, &a.Rebuy, &a.Buckets, &a.QueueRate, &a.QueueHold)
	a.PayWithin = time.Duration(payMS) * time.Millisecond
	return a, err
}

// Activity returns the activity; ENOTFOUND if there is none.
func (s *Store) Activity(ctx context.Context, id int64) (seckill.Activity, error) {
	return s.activity(ctx, s.db, id)
}

func (s *Store) activity(ctx context.Context, c Conn, id int64) (seckill.Activity, error) {
	const q = `SELECT ` + activityColumns + ` FROM activities WHERE id = ?`
	a, err := scanActivity(c.QueryRow(ctx, q, id))
	if errors.Is(err, sql.ErrNoRows) {
		return seckill.Activity{}, seckill.Errorf(seckill.ENOTFOUND, "activity %d not found", id)
	} else if err != nil {
		return seckill.Activity{}, s.errorf("activity %d: %w", id, err)
	}
	return a, nil
}

// Activities lists the activities with ends_at >= since, by id.
func (s *Store) Activities(ctx context.Context, since time.Time) ([]seckill.Activity, error) {
	const q = `SELECT ` + activityColumns + ` FROM activities WHERE ends_at >= ? ORDER BY id`
	var as []seckill.Activity
	err := s.db.Query(ctx, q, []any{s.d.time(CeilMillis(since))}, func(row Row) error {
		a, err := scanActivity(row)
		as = append(as, a)
		return err
	})
	if err != nil {
		return nil, s.errorf("activities: %w", err)
	}
	return as, nil
}

// Buyers lists the live (confirmed or paid) orders of the activity, by
// order id: the units the database holds.
func (s *Store) Buyers(ctx context.Context, activityID int64) ([]seckill.Buyer, error) {
	const q = `SELECT user_id, id FROM orders WHERE activity_id = ? AND status IN ('confirmed', 'paid') ORDER BY id`
	var bs []seckill.Buyer
	err := s.db.Query(ctx, q, []any{activityID}, func(row Row) error {
		var b seckill.Buyer
		err := row.Scan(&b.UserID, &b.OrderID)
		bs = append(bs, b)
		return err
	})
	if err != nil {
		return nil, s.errorf("buyers of activity %d: %w", activityID, err)
	}
	return bs, nil
}

// lastOrderIDQuery reads the highest id of an order id range in orders and
// in order_failures: two probes of their primary keys, whatever the number
// of orders. Two scalar subqueries rather than a UNION of two LIMIT 1
// queries, which SQLite cannot parenthesize.
const lastOrderIDQuery = `
SELECT (SELECT MAX(id) FROM orders WHERE id BETWEEN ? AND ?),
       (SELECT MAX(order_id) FROM order_failures WHERE order_id BETWEEN ? AND ?)`

// LastOrderID returns the highest order id of the activity's range (see
// seckill.OrderID), in any state or failed; 0 if none.
func (s *Store) LastOrderID(ctx context.Context, activityID int64) (int64, error) {
	id, err := lastOrderID(ctx, s.db, activityID)
	if err != nil {
		return 0, s.errorf("last order id of activity %d: %w", activityID, err)
	}
	return id, nil
}

func lastOrderID(ctx context.Context, c Conn, activityID int64) (int64, error) {
	lo, hi := seckill.OrderID(activityID, 1), seckill.OrderID(activityID, seckill.MaxOrderLocal)
	var inOrders, failed sql.NullInt64
	if err := c.QueryRow(ctx, lastOrderIDQuery, lo, hi, lo, hi).Scan(&inOrders, &failed); err != nil {
		return 0, err
	}
	return max(inOrders.Int64, failed.Int64), nil
}

// orderRow is an order as the lifecycle reads it: with its activity's
// rebuy and buckets and, for a returned order, when it was returned.
type orderRow struct {
	seckill.Order
	rebuy      bool
	buckets    int
	returnedAt time.Time
}

// orderQuery reads an order in any state. An id is in orders or in
// order_failures, never both (ApplyOrders and FailOrders see to it); the
// rank makes the answer deterministic anyway.
const orderQuery = `
SELECT 1 AS rnk, o.activity_id, o.user_id, o.status, '' AS reason, o.created_at,
       o.pay_by, o.paid_at, o.payment_ref, o.pay_key, o.closed_at, a.rebuy, a.buckets, r.returned_at
FROM orders o
JOIN activities a ON a.id = o.activity_id
LEFT JOIN order_returns r ON r.order_id = o.id
WHERE o.id = ?
UNION ALL
SELECT 2, activity_id, user_id, 'failed', reason, created_at, NULL, NULL, NULL, NULL, NULL, FALSE, 1, NULL
FROM order_failures WHERE order_id = ?
ORDER BY rnk
LIMIT 1`

// order reads order id; false if the database holds no outcome for it.
func (s *Store) order(ctx context.Context, c Conn, id int64) (orderRow, bool, error) {
	o := orderRow{Order: seckill.Order{ID: id}}
	var rank int
	var ref, key sql.NullString
	err := c.QueryRow(ctx, orderQuery, id, id).Scan(&rank, &o.ActivityID, &o.UserID, &o.Status, &o.Reason,
		TimeDest(&o.CreatedAt), TimeDest(&o.PayBy), TimeDest(&o.PaidAt), &ref, &key, TimeDest(&o.ClosedAt),
		&o.rebuy, &o.buckets, TimeDest(&o.returnedAt))
	if errors.Is(err, sql.ErrNoRows) {
		return orderRow{}, false, nil
	} else if err != nil {
		return orderRow{}, false, err
	}
	o.PaymentRef, o.PaymentKey = ref.String, key.String
	return o, true, nil
}

// Order returns the order in any state but pending; ENOTFOUND if the
// database holds no outcome for it.
func (s *Store) Order(ctx context.Context, id int64) (seckill.Order, error) {
	o, ok, err := s.order(ctx, s.db, id)
	if err != nil {
		return seckill.Order{}, s.errorf("order %d: %w", id, err)
	}
	if !ok {
		return seckill.Order{}, notFound(id)
	}
	return o.Order, nil
}

func notFound(id int64) error { return seckill.Errorf(seckill.ENOTFOUND, "order %d not found", id) }

// Load reads the activity, its buyers, its returned orders and its last
// order id in one snapshot. The buyers are the users who may not grab
// again: the holders of live orders, and of returned ones when the activity
// has no rebuy (holder_user_id is set on exactly those rows).
func (s *Store) Load(ctx context.Context, activityID int64) (seckill.Loaded, error) {
	var l seckill.Loaded
	err := s.snapshot(ctx, func(c Conn) error {
		l = seckill.Loaded{}
		a, err := s.activity(ctx, c, activityID)
		if err != nil {
			return err
		}
		l.Activity = a
		const q = `SELECT id, user_id, status, holder_user_id FROM orders WHERE activity_id = ? ORDER BY id`
		err = c.Query(ctx, q, []any{activityID}, func(row Row) error {
			var b seckill.Buyer
			var status seckill.OrderStatus
			var holder sql.NullInt64
			if err := row.Scan(&b.OrderID, &b.UserID, &status, &holder); err != nil {
				return err
			}
			if holder.Valid {
				l.Buyers = append(l.Buyers, b)
			}
			if returned(status) {
				l.Returned = append(l.Returned, b.OrderID)
			}
			return nil
		})
		if err != nil {
			return err
		}
		l.LastOrderID, err = lastOrderID(ctx, c, activityID)
		return err
	})
	var e *seckill.Error
	if errors.As(err, &e) {
		return seckill.Loaded{}, err
	} else if err != nil {
		return seckill.Loaded{}, s.errorf("load activity %d: %w", activityID, err)
	}
	return l, nil
}

// returned reports whether an order in state st gave its unit back.
func returned(st seckill.OrderStatus) bool {
	return st == seckill.OrderCancelled || st == seckill.OrderExpired
}

// validPayment checks the caller's part of a payment.
func validPayment(p seckill.Payment) error {
	switch {
	case p.Ref == "" || !validText(p.Ref, MaxRef):
		return seckill.Errorf(seckill.EINVALID, "payment_ref must be 1 to %d bytes of text", MaxRef)
	case !validText(p.Key, MaxRef):
		return seckill.Errorf(seckill.EINVALID, "the idempotency key must be at most %d bytes of text", MaxRef)
	}
	return nil
}

// Pay moves a confirmed order whose deadline lies after p.Now (the current
// time if zero) to paid with one conditional UPDATE, then reads the order
// to tell what became of it: the caller's payment, an earlier one under the
// same key (the same answer again), or a refusal (see payOutcome).
func (s *Store) Pay(ctx context.Context, p seckill.Payment) (seckill.Order, error) {
	if err := validPayment(p); err != nil {
		return seckill.Order{}, err
	}
	if p.Now.IsZero() {
		p.Now = time.Now()
	}
	q := `
UPDATE orders SET status = 'paid', paid_at = ?, payment_ref = ?, pay_key = ?
WHERE id = ? AND status = 'confirmed' AND pay_by > ?`
	args := []any{s.d.time(p.Now), p.Ref, nullString(p.Key), p.OrderID, s.d.time(p.Now)}
	if p.UserID != 0 {
		q += ` AND user_id = ?`
		args = append(args, p.UserID)
	}
	var out seckill.Order
	err := Retry(ctx, s.retryable, func() error {
		if _, err := s.db.Exec(ctx, q, args...); err != nil {
			return err
		}
		o, ok, err := s.order(ctx, s.db, p.OrderID)
		if err != nil {
			return err
		}
		out, err = payOutcome(o, ok, p)
		return err
	})
	var e *seckill.Error
	if err != nil && !errors.As(err, &e) {
		return seckill.Order{}, s.errorf("pay order %d: %w", p.OrderID, err)
	}
	return out, err
}

// payOutcome is what a payment comes to, given the order as the database
// holds it after the payment's conditional update (ok: it holds one). A
// paid order answers a call with its key again only if the call is the
// same, its payment_ref too: another reference under the same key is
// another payment, which must not be dropped in silence.
func payOutcome(o orderRow, ok bool, p seckill.Payment) (seckill.Order, error) {
	id := p.OrderID
	if !ok || (p.UserID != 0 && o.UserID != p.UserID) {
		return seckill.Order{}, notFound(id)
	}
	switch o.Status {
	case seckill.OrderPaid:
		switch {
		case o.PaymentKey != p.Key:
			return seckill.Order{}, seckill.Errorf(seckill.EORDERPAID, "order %d was already paid, under another idempotency key", id)
		case o.PaymentRef != p.Ref && p.Key == "":
			return seckill.Order{}, seckill.Errorf(seckill.EKEYREUSED, "order %d was already paid without an idempotency key, with another payment_ref", id)
		case o.PaymentRef != p.Ref:
			return seckill.Order{}, seckill.Errorf(seckill.EKEYREUSED, "order %d was paid under this idempotency key with another payment_ref: a key names one call, parameters included", id)
		}
		return o.Order, nil
	case seckill.OrderExpired:
		return seckill.Order{}, seckill.Errorf(seckill.EORDEREXPIRED, "order %d expired unpaid; its unit went back on sale", id)
	case seckill.OrderCancelled:
		return seckill.Order{}, seckill.Errorf(seckill.EORDERCANCELLED, "order %d was cancelled", id)
	case seckill.OrderFailed:
		return seckill.Order{}, seckill.Errorf(seckill.ENOTPAYABLE, "order %d failed (%s): there is nothing to pay", id, o.Reason)
	case seckill.OrderConfirmed:
		if o.PayBy.IsZero() {
			return seckill.Order{}, seckill.Errorf(seckill.ENOTPAYABLE, "the sale of order %d has no payment step", id)
		}
		if !o.PayBy.After(Millis(p.Now)) {
			return seckill.Order{}, seckill.Errorf(seckill.EORDEREXPIRED, "the payment deadline of order %d passed at %s", id, o.PayBy.Format(time.RFC3339Nano))
		}
	}
	// A payable order that the update did not pay: it cannot be (states
	// never go back); read again.
	return seckill.Order{}, fmt.Errorf("%w: order %d is %s after its payment", ErrConflict, id, o.Status)
}

// Cancel moves a confirmed order of user uid (0: any user) to cancelled
// and records its return in one transaction: the activity row is locked
// first (its remaining goes up by one), then the conditional UPDATE decides.
// The order and its return are then read back, so that a repeated cancel
// gets the same answer (see cancelOutcome).
func (s *Store) Cancel(ctx context.Context, orderID, uid int64, now time.Time) (seckill.Order, seckill.Return, error) {
	if now.IsZero() {
		now = time.Now()
	}
	var (
		o   seckill.Order
		ret seckill.Return
	)
	err := s.tx(ctx, func(c Conn) error {
		// The order's activity and its rebuy never change: read them
		// without a lock, then lock the activity row.
		const qActivity = `SELECT o.activity_id, a.rebuy FROM orders o JOIN activities a ON a.id = o.activity_id WHERE o.id = ?`
		var activityID int64
		var rebuy bool
		err := c.QueryRow(ctx, qActivity, orderID).Scan(&activityID, &rebuy)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if err == nil {
			if err := s.lockActivities(ctx, c, []int64{activityID}, nil); err != nil {
				return err
			}
			q := `UPDATE orders SET status = 'cancelled', closed_at = ?` + holderClause(rebuy) + ` WHERE id = ? AND status = 'confirmed'`
			args := []any{s.d.time(now), orderID}
			if uid != 0 {
				q += ` AND user_id = ?`
				args = append(args, uid)
			}
			n, err := c.Exec(ctx, q, args...)
			if err != nil {
				return err
			}
			if n == 1 {
				const qReturn = `
INSERT INTO order_returns (order_id, activity_id, user_id, status, returned_at)
SELECT id, activity_id, user_id, status, closed_at FROM orders WHERE id = ?`
				if err := s.exec(ctx, c, 1, qReturn, orderID); err != nil {
					return err
				}
				if err := s.restock(ctx, c, activityID, 1); err != nil {
					return err
				}
			}
		}
		row, ok, err := s.order(ctx, c, orderID)
		if err != nil {
			return err
		}
		o, ret, err = cancelOutcome(row, ok, orderID, uid)
		return err
	})
	var e *seckill.Error
	if err != nil && !errors.As(err, &e) {
		return seckill.Order{}, seckill.Return{}, s.errorf("cancel order %d: %w", orderID, err)
	}
	return o, ret, err
}

// cancelOutcome is what a cancel comes to, given the order as the database
// holds it after the cancel's conditional update (ok: it holds one).
func cancelOutcome(o orderRow, ok bool, id, uid int64) (seckill.Order, seckill.Return, error) {
	if !ok || (uid != 0 && o.UserID != uid) {
		return seckill.Order{}, seckill.Return{}, notFound(id)
	}
	switch o.Status {
	case seckill.OrderCancelled:
		return o.Order, o.ret(), nil
	case seckill.OrderPaid:
		return seckill.Order{}, seckill.Return{}, seckill.Errorf(seckill.EORDERPAID, "order %d is paid: it cannot be cancelled", id)
	case seckill.OrderExpired:
		return seckill.Order{}, seckill.Return{}, seckill.Errorf(seckill.EORDEREXPIRED, "order %d expired unpaid; its unit went back on sale", id)
	case seckill.OrderFailed:
		return seckill.Order{}, seckill.Return{}, seckill.Errorf(seckill.ENOTCANCELLABLE, "order %d failed (%s): there is nothing to cancel", id, o.Reason)
	}
	return seckill.Order{}, seckill.Return{}, fmt.Errorf("%w: order %d is %s after its cancel", ErrConflict, id, o.Status)
}

// ret is the return of a returned order.
func (o orderRow) ret() seckill.Return {
	return seckill.Return{OrderID: o.ID, ActivityID: o.ActivityID, UserID: o.UserID, Status: o.Status,
		Rebuy: o.rebuy, Buckets: o.buckets, ReturnedAt: o.returnedAt}
}

// holderClause is the SET clause that frees the buyer of a returned order
// to buy again (holder_user_id guards one holder per user and activity), if
// the activity allows it.
func holderClause(rebuy bool) string {
	if rebuy {
		return `, holder_user_id = NULL`
	}
	return ``
}

// returnFacts is what a return needs of its activity.
type returnFacts struct {
	rebuy   bool
	buckets int
}

// lockActivities locks the activity rows of ids, which are sorted, and
// records the returnFacts of each in facts if it is not nil.
func (s *Store) lockActivities(ctx context.Context, c Conn, ids []int64, facts map[int64]returnFacts) error {
	cond, args := s.d.in("id", ids)
	q := `SELECT id, rebuy, buckets FROM activities WHERE ` + cond + ` ORDER BY id` + s.d.forUpdate
	return c.Query(ctx, q, args, func(row Row) error {
		var id int64
		var f returnFacts
		err := row.Scan(&id, &f.rebuy, &f.buckets)
		if facts != nil {
			facts[id] = f
		}
		return err
	})
}

// restock gives n units back to the activity's remaining stock.
func (s *Store) restock(ctx context.Context, c Conn, activityID, n int64) error {
	const q = `UPDATE activities SET remaining = remaining + ? WHERE id = ? AND remaining + ? <= stock`
	return s.exec(ctx, c, 1, q, n, activityID, n)
}

// exec runs a statement that must affect want rows; any other count means
// another transaction got in between, and the whole one is rerun.
func (s *Store) exec(ctx context.Context, c Conn, want int, q string, args ...any) error {
	n, err := c.Exec(ctx, q, args...)
	if err != nil {
		return err
	}
	if n != int64(want) {
		return fmt.Errorf("%w: %d rows affected, want %d", ErrConflict, n, want)
	}
	return nil
}

// validFence checks a fence and the size of an Expire batch.
func validFence(f seckill.Fence, limit int) error {
	switch {
	case f.Name == "" || !validText(f.Name, MaxFenceName):
		return seckill.Errorf(seckill.EINVALID, "a fence name must be 1 to %d bytes of text", MaxFenceName)
	case limit < 1 || limit > MaxChunk:
		return seckill.Errorf(seckill.EINVALID, "expire at most 1 to %d orders at a time, not %d", MaxChunk, limit)
	}
	return nil
}

// Expire moves up to limit confirmed orders whose deadline is at or before
// now (the current time if zero) to expired, oldest deadline first, in one
// transaction that claims the fence first. The candidates come from the
// deadline index; after the activity rows are locked, the candidates still
// due are locked and updated with the same conditions, so an order paid
// meanwhile is left alone.
func (s *Store) Expire(ctx context.Context, f seckill.Fence, now time.Time, limit int) ([]seckill.Return, error) {
	if err := validFence(f, limit); err != nil {
		return nil, err
	}
	if now.IsZero() {
		now = time.Now()
	}
	var rets []seckill.Return
	err := s.tx(ctx, func(c Conn) error {
		rets = nil
		if err := s.claim(ctx, c, f); err != nil {
			return err
		}
		var ids, activities []int64
		err := c.Query(ctx, DueQuery, []any{s.d.time(now), limit}, func(row Row) error {
			var id, a int64
			err := row.Scan(&id, &a)
			ids, activities = append(ids, id), append(activities, a)
			return err
		})
		if err != nil || len(ids) == 0 {
			return err
		}
		slices.Sort(activities)
		activities = slices.Compact(activities)
		facts := make(map[int64]returnFacts, len(activities))
		if err := s.lockActivities(ctx, c, activities, facts); err != nil {
			return err
		}

		cond, args := s.d.in("id", ids)
		qLock := `SELECT id, activity_id, user_id FROM orders WHERE ` + cond +
			` AND status = 'confirmed' AND pay_by <= ? ORDER BY id` + s.d.forUpdate
		at := Millis(now)
		err = c.Query(ctx, qLock, append(args, s.d.time(now)), func(row Row) error {
			r := seckill.Return{Status: seckill.OrderExpired, ReturnedAt: at}
			err := row.Scan(&r.OrderID, &r.ActivityID, &r.UserID)
			r.Rebuy, r.Buckets = facts[r.ActivityID].rebuy, facts[r.ActivityID].buckets
			rets = append(rets, r)
			return err
		})
		if err != nil || len(rets) == 0 {
			return err
		}
		return s.expire(ctx, c, f, rets, now)
	})
	if err != nil {
		if errors.Is(err, seckill.ErrFenced) {
			return nil, fmt.Errorf("%s: expire under fence %s token %d: %w", s.name, f.Name, f.Token, err)
		}
		return nil, s.errorf("expire: %w", err)
	}
	return rets, nil
}

// DueQuery reads the confirmed orders whose deadline is at or before its
// first argument, at most its second, along the deadline index (exported
// for the engines' tests, which show the plan).
const DueQuery = `
SELECT id, activity_id FROM orders
WHERE status = 'confirmed' AND pay_by IS NOT NULL AND pay_by <= ?
ORDER BY pay_by, id
LIMIT ?`

// claim stores the fence's token unless the database holds a higher one
// for its name, which it reports as ErrFenced. The fence row stays locked
// until the transaction ends, so expirers take turns.
func (s *Store) claim(ctx context.Context, c Conn, f seckill.Fence) error {
	if _, err := c.Exec(ctx, s.d.claimFence, f.Name, f.Token); err != nil {
		return err
	}
	var token int64
	if err := c.QueryRow(ctx, `SELECT token FROM fences WHERE name = ?`, f.Name).Scan(&token); err != nil {
		return err
	}
	if token > f.Token {
		return fmt.Errorf("%w (token %d is in force)", seckill.ErrFenced, token)
	}
	return nil
}

// expire writes the locked due orders rets as expired, their returns, and
// the units back.
func (s *Store) expire(ctx context.Context, c Conn, f seckill.Fence, rets []seckill.Return, now time.Time) error {
	for _, free := range []bool{true, false} {
		var ids []int64
		for _, r := range rets {
			if r.Rebuy == free {
				ids = append(ids, r.OrderID)
			}
		}
		if len(ids) == 0 {
			continue
		}
		cond, args := s.d.in("id", ids)
		q := `UPDATE orders SET status = 'expired', closed_at = ?` + holderClause(free) +
			` WHERE ` + cond + ` AND status = 'confirmed' AND pay_by <= ?`
		args = append(append([]any{s.d.time(now)}, args...), s.d.time(now))
		if err := s.exec(ctx, c, len(ids), q, args...); err != nil {
			return err
		}
	}

	vals := make([]any, 0, 5*len(rets))
	units := make(map[int64]int64)
	for _, r := range rets {
		vals = append(vals, r.OrderID, r.ActivityID, r.UserID, f.Token, s.d.time(now))
		units[r.ActivityID]++
	}
	q := `INSERT INTO order_returns (order_id, activity_id, user_id, status, fence, returned_at) VALUES ` +
		Rows("(?, ?, ?, 'expired', ?, ?)", len(rets))
	if err := s.exec(ctx, c, len(rets), q, vals...); err != nil {
		return err
	}
	for _, a := range slices.Sorted(maps.Keys(units)) {
		if err := s.restock(ctx, c, a, units[a]); err != nil {
			return err
		}
	}
	return nil
}

// NextDeadline returns the earliest deadline of a confirmed order, from the
// deadline index.
func (s *Store) NextDeadline(ctx context.Context) (time.Time, bool, error) {
	var t time.Time
	err := s.db.QueryRow(ctx, NextDeadlineQuery).Scan(TimeDest(&t))
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, false, nil
	} else if err != nil {
		return time.Time{}, false, s.errorf("next deadline: %w", err)
	}
	return t, true, nil
}

// NextDeadlineQuery reads the earliest deadline: the first entry of the
// deadline index (exported for the engines' tests, which show the plan).
const NextDeadlineQuery = `
SELECT pay_by FROM orders
WHERE status = 'confirmed' AND pay_by IS NOT NULL
ORDER BY pay_by
LIMIT 1`

// validLimit checks the size of a page.
func validLimit(limit int) error {
	if limit < 1 || limit > MaxChunk {
		return seckill.Errorf(seckill.EINVALID, "limit must lie between 1 and %d, not %d", MaxChunk, limit)
	}
	return nil
}

// PendingReturnsQuery reads the oldest returns not yet restocked, at most
// its argument, along their index (exported for the engines' tests, which
// show the plan).
const PendingReturnsQuery = `
SELECT r.order_id, r.activity_id, r.user_id, r.status, a.rebuy, a.buckets, r.returned_at
FROM order_returns r JOIN activities a ON a.id = r.activity_id
WHERE r.restocked_at IS NULL
ORDER BY r.returned_at, r.order_id
LIMIT ?`

// PendingReturns lists up to limit returns not yet recorded as restocked,
// oldest first, from the index of those.
func (s *Store) PendingReturns(ctx context.Context, limit int) ([]seckill.Return, error) {
	if err := validLimit(limit); err != nil {
		return nil, err
	}
	var rets []seckill.Return
	err := s.db.Query(ctx, PendingReturnsQuery, []any{limit}, func(row Row) error {
		var r seckill.Return
		err := row.Scan(&r.OrderID, &r.ActivityID, &r.UserID, &r.Status, &r.Rebuy, &r.Buckets, TimeDest(&r.ReturnedAt))
		rets = append(rets, r)
		return err
	})
	if err != nil {
		return nil, s.errorf("pending returns: %w", err)
	}
	return rets, nil
}

// Restocked records that the Redis halves of these returns are done; ids
// already recorded, or of no return, are left alone.
func (s *Store) Restocked(ctx context.Context, orderIDs []int64) error {
	now := s.d.time(time.Now())
	for chunk := range slices.Chunk(orderIDs, MaxChunk) {
		cond, args := s.d.in("order_id", chunk)
		q := `UPDATE order_returns SET restocked_at = ? WHERE ` + cond + ` AND restocked_at IS NULL`
		err := Retry(ctx, s.retryable, func() error {
			_, err := s.db.Exec(ctx, q, append([]any{now}, args...)...)
			return err
		})
		if err != nil {
			return s.errorf("record restocked returns: %w", err)
		}
	}
	return nil
}

// UserOrders lists the user's orders, newest first (by creation time, then
// id), created before the cursor: a page of orders and a page of failures,
// each read along its (user_id, created_at, id) index, merged.
func (s *Store) UserOrders(ctx context.Context, uid int64, before seckill.Cursor, limit int) ([]seckill.Order, error) {
	if err := validLimit(limit); err != nil {
		return nil, err
	}
	after := func(id string) (string, []any) {
		if before.CreatedAt.IsZero() {
			return "", nil
		}
		t := s.d.time(before.CreatedAt)
		return ` AND (created_at < ? OR (created_at = ? AND ` + id + ` < ?))`, []any{t, t, before.OrderID}
	}
	var list []seckill.Order
	cond, args := after("id")
	q := `
SELECT id, activity_id, user_id, status, created_at, pay_by, paid_at, payment_ref, pay_key, closed_at
FROM orders WHERE user_id = ?` + cond + `
ORDER BY created_at DESC, id DESC
LIMIT ?`
	err := s.db.Query(ctx, q, append(append([]any{uid}, args...), limit), func(row Row) error {
		var o seckill.Order
		var ref, key sql.NullString
		err := row.Scan(&o.ID, &o.ActivityID, &o.UserID, &o.Status, TimeDest(&o.CreatedAt), TimeDest(&o.PayBy),
			TimeDest(&o.PaidAt), &ref, &key, TimeDest(&o.ClosedAt))
		o.PaymentRef, o.PaymentKey = ref.String, key.String
		list = append(list, o)
		return err
	})
	if err != nil {
		return nil, s.errorf("orders of user %d: %w", uid, err)
	}
	cond, args = after("order_id")
	q = `
SELECT order_id, activity_id, user_id, reason, created_at
FROM order_failures WHERE user_id = ?` + cond + `
ORDER BY created_at DESC, order_id DESC
LIMIT ?`
	err = s.db.Query(ctx, q, append(append([]any{uid}, args...), limit), func(row Row) error {
		o := seckill.Order{Status: seckill.OrderFailed}
		err := row.Scan(&o.ID, &o.ActivityID, &o.UserID, &o.Reason, TimeDest(&o.CreatedAt))
		list = append(list, o)
		return err
	})
	if err != nil {
		return nil, s.errorf("failed orders of user %d: %w", uid, err)
	}
	slices.SortFunc(list, func(a, b seckill.Order) int {
		return cmp.Or(b.CreatedAt.Compare(a.CreatedAt), cmp.Compare(b.ID, a.ID))
	})
	return list[:min(len(list), limit)], nil
}

// StateCounts counts the activity's orders by state, failed ones included;
// states without orders are absent.
func (s *Store) StateCounts(ctx context.Context, activityID int64) (seckill.StateCounts, error) {
	counts := make(seckill.StateCounts)
	const q = `
SELECT status, COUNT(*) FROM orders WHERE activity_id = ? GROUP BY status
UNION ALL
SELECT 'failed', COUNT(*) FROM order_failures WHERE activity_id = ?`
	err := s.db.Query(ctx, q, []any{activityID, activityID}, func(row Row) error {
		var st seckill.OrderStatus
		var n int64
		if err := row.Scan(&st, &n); err != nil {
			return err
		}
		if n > 0 {
			counts[st] = n
		}
		return nil
	})
	if err != nil {
		return nil, s.errorf("state counts of activity %d: %w", activityID, err)
	}
	return counts, nil
}
