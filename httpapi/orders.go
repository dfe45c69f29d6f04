package httpapi

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/sale"
)

// The order lifecycle after the grab: pay, cancel, and the buyer's list.
// Pay and cancel are idempotent: the database makes each transition once,
// and a repeated call answers the order as the first call left it.

// orderBody is an order as the API shows it. Ids are strings: JavaScript
// numbers cannot hold every int64.
type orderBody struct {
	OrderID    string              `json:"order_id"`
	ActivityID int64               `json:"activity_id,omitempty"`
	UserID     string              `json:"user_id,omitempty"`
	Status     seckill.OrderStatus `json:"status"`
	Reason     string              `json:"reason,omitempty"`
	CreatedAt  *time.Time          `json:"created_at,omitempty"`
	PayBy      *time.Time          `json:"pay_by,omitempty"`
	PaidAt     *time.Time          `json:"paid_at,omitempty"`
	PaymentRef string              `json:"payment_ref,omitempty"`
	ClosedAt   *time.Time          `json:"closed_at,omitempty"`
}

func newOrderBody(o seckill.Order) orderBody {
	return orderBody{OrderID: strconv.FormatInt(o.ID, 10), ActivityID: o.ActivityID,
		UserID: strconv.FormatInt(o.UserID, 10), Status: o.Status, Reason: o.Reason,
		CreatedAt: timeOrNil(o.CreatedAt), PayBy: timeOrNil(o.PayBy), PaidAt: timeOrNil(o.PaidAt),
		PaymentRef: o.PaymentRef, ClosedAt: timeOrNil(o.ClosedAt)}
}

func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

// orderCaller returns the order id of the path and the user acting on it:
// 0 for an admin (any order), else the caller's user id.
func (s *Server) orderCaller(r *http.Request) (oid, uid int64, err error) {
	if oid, err = pathID(r, "order"); err != nil {
		return 0, 0, err
	}
	c, err := s.caller(r)
	if err != nil || c.Admin {
		return oid, 0, err
	}
	return oid, c.UserID, nil
}

func (s *Server) getOrder(w http.ResponseWriter, r *http.Request) {
	oid, uid, err := s.orderCaller(r)
	if err != nil {
		writeError(w, err)
		return
	}
	o, err := s.sale.Order(r.Context(), oid, uid)
	if err != nil {
		s.failOrder(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, newOrderBody(o))
}

// DefaultMissDelay is how long the order routes wait, by default, before
// they answer 404. An id that is no order of the caller costs the server
// no database work, but a client that asks again as soon as it is answered
// would still take the CPU: on a 2-core machine a flood of made-up ids
// from 64 connections, answered at once, ran at 11,000 lookups a second
// and made the buyers' orders 4 times slower to be confirmed. Answered
// after 100 ms, a connection can ask at most 10 ids a second. A buyer
// asking for their own order, pending or not, is answered at once; one
// who mistyped an id waits 100 ms.
const DefaultMissDelay = 100 * time.Millisecond

// WithMissDelay sets how long the order routes wait before they answer
// 404 (d <= 0: they answer at once). Without it, DefaultMissDelay.
func WithMissDelay(d time.Duration) Option {
	return func(s *Server) { s.missDelay = max(d, 0) }
}

// failOrder is fail for the order routes: a not found waits missDelay
// first (or until the client goes).
func (s *Server) failOrder(w http.ResponseWriter, r *http.Request, err error) {
	if seckill.ErrorCode(err) == seckill.ENOTFOUND && s.missDelay > 0 {
		t := time.NewTimer(s.missDelay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
		}
	}
	s.fail(w, r, err)
}

type payRequest struct {
	PaymentRef string `json:"payment_ref"`
}

// payOrder records a payment: by the buyer, or by the shop's payment
// callback with the admin token (the provider's event id as the
// Idempotency-Key, its transaction id as payment_ref).
func (s *Server) payOrder(w http.ResponseWriter, r *http.Request) {
	oid, uid, err := s.orderCaller(r)
	if err != nil {
		writeError(w, err)
		return
	}
	var req payRequest
	if err := decode(r, &req); err != nil {
		writeError(w, err)
		return
	}
	key, err := idempotencyKey(r)
	if err != nil {
		writeError(w, err)
		return
	}
	o, err := s.sale.Pay(r.Context(), oid, uid, req.PaymentRef, key)
	if err != nil {
		s.failOrder(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, newOrderBody(o))
}

// cancelOrder cancels a confirmed order; its unit goes back on sale. It
// reads no body.
func (s *Server) cancelOrder(w http.ResponseWriter, r *http.Request) {
	oid, uid, err := s.orderCaller(r)
	if err != nil {
		writeError(w, err)
		return
	}
	if _, err := idempotencyKey(r); err != nil {
		writeError(w, err)
		return
	}
	o, err := s.sale.Cancel(r.Context(), oid, uid)
	if err != nil {
		s.failOrder(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, newOrderBody(o))
}

// idempotencyKey returns the Idempotency-Key header ("" if absent); more
// than one is refused, like any repeated identity header.
func idempotencyKey(r *http.Request) (string, error) {
	vs := r.Header.Values("Idempotency-Key")
	switch {
	case len(vs) == 0:
		return "", nil
	case len(vs) > 1:
		return "", seckill.Errorf(seckill.EINVALID, "the Idempotency-Key header must be sent once")
	case vs[0] == "":
		return "", seckill.Errorf(seckill.EINVALID, "the Idempotency-Key header must not be empty")
	}
	return vs[0], nil
}

type ordersPage struct {
	Orders     []orderBody `json:"orders"`
	NextCursor string      `json:"next_cursor,omitempty"`
}

// myOrders lists the caller's orders, newest first: ?limit= (1 to 100,
// default 20) and ?cursor= (the next_cursor of the previous page).
func (s *Server) myOrders(w http.ResponseWriter, r *http.Request) {
	c, err := s.caller(r)
	if err != nil {
		writeError(w, err)
		return
	}
	if c.UserID == 0 {
		writeError(w, seckill.Errorf(seckill.EINVALID, "this lists a buyer's own orders: a user identity is required"))
		return
	}
	q := r.URL.Query()
	limit := 20
	if v := q.Get("limit"); v != "" {
		n, ok := parsePositive(v)
		if !ok || n > sale.MaxUserOrders {
			writeError(w, seckill.Errorf(seckill.EINVALID, "limit must be an integer between 1 and %d", sale.MaxUserOrders))
			return
		}
		limit = int(n)
	}
	cur, err := parseCursor(q.Get("cursor"))
	if err != nil {
		writeError(w, err)
		return
	}
	os, err := s.sale.UserOrders(r.Context(), c.UserID, cur, limit)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	page := ordersPage{Orders: make([]orderBody, len(os))}
	for i, o := range os {
		page.Orders[i] = newOrderBody(o)
	}
	if len(os) == limit {
		last := os[len(os)-1]
		page.NextCursor = strconv.FormatInt(last.CreatedAt.UnixMilli(), 10) + "." + strconv.FormatInt(last.ID, 10)
	}
	writeJSON(w, http.StatusOK, page)
}

// parseCursor parses "<created_at in Unix ms>.<order id>"; "" is the start.
func parseCursor(v string) (seckill.Cursor, error) {
	if v == "" {
		return seckill.Cursor{}, nil
	}
	bad := seckill.Errorf(seckill.EINVALID, "cursor must be the next_cursor of a previous page")
	ms, id, ok := strings.Cut(v, ".")
	if !ok {
		return seckill.Cursor{}, bad
	}
	m, ok1 := parsePositive(ms)
	n, ok2 := parsePositive(id)
	if !ok1 || !ok2 {
		return seckill.Cursor{}, bad
	}
	return seckill.Cursor{CreatedAt: time.UnixMilli(m).UTC(), OrderID: n}, nil
}
