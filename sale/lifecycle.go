package sale

import (
	"context"
	"errors"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/seckilldev/seckill"
)

// The order's life after the grab (see seckill.OrderStatus): the database
// makes every transition with one conditional update, so that a repeated
// click, a payment racing the deadline, or two instances doing the same
// thing cannot make two; this layer adds what the database cannot know (an
// order still pending in Redis) and gives a returned unit back to Redis.

// MaxUserOrders bounds a page of UserOrders.
const MaxUserOrders = 100

// Pay records that user uid (0: an admin or the payment provider's
// callback) paid order oid, with the provider's reference ref and the
// caller's idempotency key ("": the order id is the key). A repeated call
// answers the paid order again and changes nothing.
func (s *Service) Pay(ctx context.Context, oid, uid int64, ref, key string) (seckill.Order, error) {
	if err := checkText("payment_ref", ref, 1); err != nil {
		return seckill.Order{}, err
	}
	if err := checkText("Idempotency-Key", key, 0); err != nil {
		return seckill.Order{}, err
	}
	o, err := s.store.Pay(ctx, seckill.Payment{OrderID: oid, UserID: uid, Ref: ref, Key: key, Now: time.Now()})
	s.changed(oid, uid, o, err)
	if seckill.ErrorCode(err) == seckill.ENOTFOUND {
		return seckill.Order{}, s.notInDB(ctx, oid, uid, seckill.ENOTPAYABLE, "pay")
	}
	return o, s.storeErr("pay order", oid, err)
}

// Cancel cancels order oid of user uid (0: an admin), and gives its unit
// back: to the database in the cancelling transaction, then to Redis. If
// the Redis half fails (or this process dies first), the expiry job's
// repair of pending returns completes it, exactly once. A repeated call
// answers the cancelled order again and changes nothing.
func (s *Service) Cancel(ctx context.Context, oid, uid int64) (seckill.Order, error) {
	o, ret, err := s.store.Cancel(ctx, oid, uid, time.Now())
	s.changed(oid, uid, o, err)
	switch {
	case seckill.ErrorCode(err) == seckill.ENOTFOUND:
		return seckill.Order{}, s.notInDB(ctx, oid, uid, seckill.ENOTCANCELLABLE, "cancel")
	case err != nil:
		return seckill.Order{}, s.storeErr("cancel order", oid, err)
	}
	if ret.OrderID != 0 {
		// The buyer's answer does not wait for Redis to be reachable: the
		// cancellation is committed, and the unit comes back either way.
		s.Restock(context.WithoutCancel(ctx), ret)
	}
	return o, nil
}

// Restock does the Redis half of a return and records it done. An error is
// logged, not returned: the return stays pending in the database, and the
// expiry job's repair does it again (the Redis half is idempotent).
func (s *Service) Restock(ctx context.Context, r seckill.Return) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := s.engine.Return(ctx, r); err != nil {
		s.log.Warn("give a returned unit back to redis; the expiry job will retry", "order", r.OrderID, "err", err)
		return
	}
	s.Restocked(r.ActivityID)
	if err := s.store.Restocked(ctx, []int64{r.OrderID}); err != nil {
		s.log.Warn("record a returned unit as restocked; the expiry job will retry", "order", r.OrderID, "err", err)
	}
}

// UserOrders lists the orders of user uid that the database holds, newest
// first, after the cursor (zero: from the newest); limit is 1 to
// MaxUserOrders. Pending orders appear once the worker has written them.
func (s *Service) UserOrders(ctx context.Context, uid int64, before seckill.Cursor, limit int) ([]seckill.Order, error) {
	if uid <= 0 {
		return nil, seckill.Errorf(seckill.EINVALID, "user id must be a positive integer")
	}
	if limit < 1 || limit > MaxUserOrders {
		return nil, seckill.Errorf(seckill.EINVALID, "limit must lie between 1 and %d", MaxUserOrders)
	}
	os, err := s.store.UserOrders(ctx, uid, before, limit)
	return os, s.storeErr("list orders of user", uid, err)
}

// notInDB answers a transition asked of an order that the database does not
// hold: refused with code if Redis holds it (still pending), else not
// found.
func (s *Service) notInDB(ctx context.Context, oid, uid int64, code, verb string) error {
	o, err := s.Order(ctx, oid, uid)
	switch {
	case err != nil:
		return err
	case o.Status == seckill.OrderPending:
		return seckill.Errorf(code, "order %d is still being written; %s it once it is confirmed", oid, verb)
	}
	// Written between the two reads: the caller may simply try again.
	return seckill.Errorf(seckill.EUNAVAILABLE, "order %d changed meanwhile; try again", oid)
}

// storeErr passes the database's answers to the caller and turns any
// other failure into "unavailable", logged.
func (s *Service) storeErr(what string, id int64, err error) error {
	if err == nil || seckill.ErrorCode(err) != seckill.EINTERNAL {
		return err
	}
	if errors.Is(err, context.Canceled) {
		// The client went away before the database answered: nothing is
		// wrong with the database, and a repeated call (pay and cancel are
		// idempotent) gets the order's state.
		return seckill.Errorf(seckill.EUNAVAILABLE, "the request was cancelled")
	}
	s.log.Error(what, "id", id, "err", err)
	return seckill.Errorf(seckill.EUNAVAILABLE, "the database cannot be reached right now")
}

// checkText validates a caller-supplied reference: min to 128 bytes of
// printable UTF-8.
func checkText(name, v string, min int) error {
	switch {
	case len(v) < min:
		return seckill.Errorf(seckill.EINVALID, "%s is required", name)
	case len(v) > 128:
		return seckill.Errorf(seckill.EINVALID, "%s must be at most 128 bytes", name)
	case !utf8.ValidString(v):
		return seckill.Errorf(seckill.EINVALID, "%s must be UTF-8 text", name)
	}
	for _, r := range v {
		if !unicode.IsPrint(r) {
			return seckill.Errorf(seckill.EINVALID, "%s must be printable text", name)
		}
	}
	return nil
}
