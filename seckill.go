// Package seckill is the flash-sale domain: activities (sales of a limited
// stock), orders, the errors every layer speaks, and the interfaces that the
// outside systems (Redis, SQL databases) implement.
//
// The layout follows the "standard package layout": this package depends on
// nothing but the standard library; each dependency lives in its own
// subpackage (stock for Redis, store/* for SQL engines, httpapi, worker), and
// cmd/seckill wires them together.
package seckill

import (
	"context"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// MaxStock bounds an activity's stock: large enough for any real sale, small
// enough that counters never approach float64 precision inside Lua.
const MaxStock = 100_000_000

// Order ids name their activity, so that an order is found with one lookup
// whatever the number of live sales:
//
//	 63            39 38                               3 2   0
//	| activity id     | ms since the activity's StartsAt | seq |
//	|  24 bits        |  36 bits                         | 3 b |
//	                  |<------------- local ------------------>|
//
// Redis issues the local part inside the grab script, per activity and
// atomically: local = max(last + 1, (now - StartsAt in ms) << 3). More than
// eight orders in a millisecond borrow from the next millisecond instead of
// repeating, so locals only grow. An activity of several Buckets issues
// them per bucket, bucket b those that are b modulo Buckets. Redis stores and returns only the local
// part (below 2^39, exact in a Lua double); Go composes the full id.
const (
	// OrderLocalBits is the width of an order id's local part.
	OrderLocalBits = 39
	// OrderSeqBits is the width of the sequence within a millisecond.
	OrderSeqBits = 3
	// MaxOrderLocal is the largest local part.
	MaxOrderLocal = 1<<OrderLocalBits - 1
	// MaxActivityID is the largest activity id an order id can carry:
	// 24 + 39 bits fill a positive int64.
	MaxActivityID = 1<<(63-OrderLocalBits) - 1
	// MaxSaleWindow bounds EndsAt - StartsAt, so that the milliseconds of
	// a sale fit the 36 bits of an order id's time.
	MaxSaleWindow = 366 * 24 * time.Hour
)

// OrderID composes the order id of an activity's local part.
func OrderID(activityID, local int64) int64 { return activityID<<OrderLocalBits | local }

// OrderActivity returns the activity an order id belongs to.
func OrderActivity(orderID int64) int64 { return orderID >> OrderLocalBits }

// OrderLocal returns the local part of an order id.
func OrderLocal(orderID int64) int64 { return orderID & MaxOrderLocal }

// OrderTime returns when an order of an activity that starts at startsAt was
// issued (to the millisecond, later by the borrowing described above).
func OrderTime(startsAt time.Time, orderID int64) time.Time {
	return startsAt.Add(time.Duration(OrderLocal(orderID)>>OrderSeqBits) * time.Millisecond).UTC()
}

// ErrActivityIDs is returned by Store.CreateActivity when the database hands
// out an id above MaxActivityID, which no order id could carry.
var ErrActivityIDs = Errorf(EUNAVAILABLE, "no activity can be created: activity ids are used up (the largest is %d)", MaxActivityID)

// Activity is one flash sale: a stock sold between StartsAt and EndsAt.
// Activities are immutable once created, which lets every instance cache them.
type Activity struct {
	ID        int64     `json:"id"`
	Name      string    `json:"name"`
	Stock     int64     `json:"stock"`
	Remaining int64     `json:"remaining"`
	StartsAt  time.Time `json:"starts_at"`
	EndsAt    time.Time `json:"ends_at"`
	// PayWithin is the payment window: a confirmed order must be paid
	// within it, or it expires and its unit goes back on sale. 0: the sale
	// has no payment step and orders end at confirmed.
	PayWithin time.Duration `json:"-"`
	// Rebuy lets a buyer whose order was cancelled or expired grab again.
	Rebuy bool `json:"-"`
	// Buckets splits the stock in Redis into that many buckets, each under
	// a hash tag of its own, so that one sale can use the cores of several
	// Redis Cluster masters (see package stock). Each user has one home
	// bucket. 0 means 1: the whole stock under one key.
	Buckets int `json:"-"`
	// QueueRate puts the sale behind a waiting room (package queue) that
	// admits at most that many buyers a second; only an admitted buyer's
	// grab, with the pass the room gives, is let through. 0: no waiting
	// room, whoever asks first grabs.
	QueueRate int `json:"-"`
	// QueueHold, with a waiting room, also bounds the buyers admitted and
	// not yet bought by QueueHold for each unit left (0: the rate alone).
	QueueHold int `json:"-"`
}

// MaxBuckets bounds Activity.Buckets.
const MaxBuckets = 256

// MaxQueueRate and MaxQueueHold bound Activity.QueueRate and QueueHold.
const (
	MaxQueueRate = 1_000_000
	MaxQueueHold = 100
)

// BucketCount returns the number of buckets a's stock is split into: 1
// when Buckets is 0.
func (a *Activity) BucketCount() int { return max(1, a.Buckets) }

// Validate reports the first field that makes a an invalid new activity.
func (a *Activity) Validate() error {
	switch {
	case a.Name == "":
		return Errorf(EINVALID, "name must not be empty")
	case len(a.Name) > 200:
		return Errorf(EINVALID, "name must be at most 200 bytes")
	case !utf8.ValidString(a.Name) || strings.ContainsFunc(a.Name, unprintable):
		return Errorf(EINVALID, "name must be UTF-8 text without control or format characters (such as a bidi override) or line separators")
	case strings.TrimFunc(a.Name, unicode.IsSpace) == "":
		return Errorf(EINVALID, "name must not be blank")
	case a.Stock < 1:
		return Errorf(EINVALID, "stock must be at least 1")
	case a.Stock > MaxStock:
		return Errorf(EINVALID, "stock must be at most %d", MaxStock)
	case !inYears(a.StartsAt):
		return Errorf(EINVALID, "starts_at %s is out of range: times must lie between the years 2000 and 9999", a.StartsAt.UTC().Format(time.RFC3339))
	case !inYears(a.EndsAt):
		return Errorf(EINVALID, "ends_at %s is out of range: times must lie between the years 2000 and 9999", a.EndsAt.UTC().Format(time.RFC3339))
	case !a.EndsAt.After(a.StartsAt):
		return Errorf(EINVALID, "ends_at must be after starts_at")
	case a.EndsAt.Sub(a.StartsAt) > MaxSaleWindow:
		return Errorf(EINVALID, "a sale may last at most 366 days")
	case a.PayWithin < 0 || a.PayWithin > MaxPayWithin:
		return Errorf(EINVALID, "the payment window must lie between 0 and 7 days")
	case a.PayWithin%time.Second != 0:
		return Errorf(EINVALID, "the payment window must be whole seconds")
	case a.Buckets < 0 || a.Buckets > MaxBuckets:
		return Errorf(EINVALID, "buckets must lie between 1 and %d", MaxBuckets)
	case a.QueueRate < 0 || a.QueueRate > MaxQueueRate:
		return Errorf(EINVALID, "queue.rate must lie between 1 and %d", MaxQueueRate)
	case a.QueueHold < 0 || a.QueueHold > MaxQueueHold:
		return Errorf(EINVALID, "queue.hold must lie between 0 and %d", MaxQueueHold)
	case a.QueueHold > 0 && a.QueueRate == 0:
		return Errorf(EINVALID, "queue.hold needs a waiting room: give queue.rate")
	}
	return nil
}

// inYears reports whether t lies in the years an activity may use (the
// zero time, year 1, does not).
func inYears(t time.Time) bool { return t.Year() >= 2000 && t.Year() <= 9999 }

// unprintable reports the runes a name may not hold: control characters,
// line and paragraph separators, and format characters, which change how
// the text around them is shown (U+202E turns it right to left) or hide in
// it (U+200B, U+2060). The zero-width joiner and non-joiner are format
// characters that ordinary text needs (Persian and Indic words, emoji
// sequences), and are allowed.
func unprintable(r rune) bool {
	switch {
	case r == '\u200c' || r == '\u200d':
		return false
	case unicode.IsControl(r), unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp):
		return true
	}
	return false
}

// MaxPayWithin bounds an activity's payment window.
const MaxPayWithin = 7 * 24 * time.Hour

// OrderStatus is what a buyer is told about an order.
type OrderStatus string

const (
	// OrderPending: Redis accepted the grab; the order is queued for the database.
	OrderPending OrderStatus = "pending"
	// OrderConfirmed: the order is committed in the database.
	OrderConfirmed OrderStatus = "confirmed"
	// OrderFailed: the order could not be created; its stock was given back.
	OrderFailed OrderStatus = "failed"
	// OrderPaid: the buyer paid a confirmed order before its deadline.
	OrderPaid OrderStatus = "paid"
	// OrderCancelled: the buyer (or an admin) cancelled a confirmed order;
	// its unit went back on sale.
	OrderCancelled OrderStatus = "cancelled"
	// OrderExpired: a confirmed order was not paid by its deadline; its
	// unit went back on sale.
	OrderExpired OrderStatus = "expired"
)

// The order state machine. The database enforces it with conditional
// updates; these are the only transitions, each made at most once:
//
//	pending -> confirmed -> paid
//	                     -> cancelled
//	                     -> expired
//	pending -> failed
//
// A paid order never expires nor is cancelled; a cancelled or expired one
// is never paid. Live orders hold a unit of stock: confirmed and paid ones
// (and pending ones, in Redis).

// Live reports whether an order in state s holds a unit of stock in the
// database.
func (s OrderStatus) Live() bool { return s == OrderConfirmed || s == OrderPaid }

// Failure reasons recorded for failed orders.
const (
	ReasonSoldOut   = "sold_out"  // the database had no stock left although Redis said yes
	ReasonDuplicate = "duplicate" // the database already holds another order of this user
	ReasonPoison    = "poison"    // the message failed too many deliveries
)

// Order is one buyer's order in one activity.
type Order struct {
	ID         int64       `json:"-"`
	ActivityID int64       `json:"activity_id"`
	UserID     int64       `json:"-"`
	Status     OrderStatus `json:"status"`
	Reason     string      `json:"reason,omitempty"`
	CreatedAt  time.Time   `json:"created_at"`
	// PayBy is the payment deadline of a confirmed order of a sale with a
	// payment step (set when the order is confirmed: confirmation time +
	// the activity's PayWithin); zero otherwise.
	PayBy time.Time `json:"-"`
	// PaidAt, PaymentRef and PaymentKey are set on a paid order: when, the
	// payment provider's reference, and the idempotency key of the call
	// that paid it ("" when the call gave none).
	PaidAt     time.Time `json:"-"`
	PaymentRef string    `json:"-"`
	PaymentKey string    `json:"-"`
	// ClosedAt is when a cancelled or expired order was closed.
	ClosedAt time.Time `json:"-"`
}

// Payment is a request to record that a buyer paid an order.
type Payment struct {
	OrderID int64
	// UserID is the buyer paying (0: an admin or the payment provider's
	// callback, for any buyer). An order of another user is not found.
	UserID int64
	// Ref is the payment provider's reference (1 to 128 bytes).
	Ref string
	// Key is the caller's idempotency key (0 to 128 bytes; "": the order
	// id itself is the key).
	Key string
	// Now is the time of the payment: it must lie before the deadline.
	Now time.Time
}

// Fence is a fencing token claimed by a writer that holds a lock named Name:
// the database refuses the write if it has seen a higher token for Name.
type Fence struct {
	Name  string
	Token int64
}

// Return is a unit of stock given back by a cancelled or expired order. The
// database half (remaining + 1) is committed with the order's state change;
// the Redis half (stock + 1, the buyer's mark) follows, and Restocked records
// that it was done, so that a crash in between is repaired exactly once.
type Return struct {
	OrderID    int64
	ActivityID int64
	UserID     int64
	Status     OrderStatus // OrderCancelled or OrderExpired
	Rebuy      bool        // the activity's Rebuy: whether the buyer's mark goes too
	Buckets    int         // the activity's Buckets: where in Redis the unit goes
	ReturnedAt time.Time
}

// StateCounts counts the orders of an activity by state, as the database
// holds them (pending orders are in Redis only).
type StateCounts map[OrderStatus]int64

// Loaded is what Redis is rebuilt from, read from the database in one
// consistent snapshot.
type Loaded struct {
	Activity Activity
	// Buyers holds, for each user who may not grab again, their order:
	// the live orders, and the cancelled or expired ones of an activity
	// without Rebuy.
	Buyers []Buyer
	// Returned lists the orders whose units were returned (cancelled or
	// expired): the receipts of the Redis halves already reflected here.
	Returned []int64
	// LastOrderID is the highest order id of the activity in the database.
	LastOrderID int64
}

// OrderRequest is an accepted grab travelling from Redis to the database.
type OrderRequest struct {
	OrderID    int64
	ActivityID int64
	UserID     int64
	CreatedAt  time.Time
}

// Outcome is what the database made of one OrderRequest.
type Outcome struct {
	Status OrderStatus // OrderConfirmed or OrderFailed
	Reason string      // for OrderFailed: ReasonSoldOut, ReasonDuplicate or ReasonPoison
	// ExistingOrderID is, for ReasonDuplicate, the user's order that the
	// database already holds for this activity.
	ExistingOrderID int64
}

// Cursor is a position in a list of orders sorted newest first: the
// creation time and id of the last order of the previous page.
type Cursor struct {
	CreatedAt time.Time
	OrderID   int64
}

// Buyer is a user who holds an order in an activity.
type Buyer struct {
	UserID  int64
	OrderID int64
}

// Store is the system of record: a SQL database. Each engine (PostgreSQL,
// MySQL/MariaDB, SQLite) implements it in its own package under store/.
type Store interface {
	// CreateActivity inserts a (validated) activity with Remaining = Stock
	// and sets its ID. It inserts nothing and returns ErrActivityIDs if the
	// database's next id is above MaxActivityID.
	CreateActivity(ctx context.Context, a *Activity) error
	// Activity returns one activity; ENOTFOUND if there is none.
	Activity(ctx context.Context, id int64) (Activity, error)
	// Activities lists the activities that have not ended before since.
	Activities(ctx context.Context, since time.Time) ([]Activity, error)
	// Buyers lists the live (confirmed or paid) orders of an activity: the
	// units the database holds (to reconcile Redis).
	Buyers(ctx context.Context, activityID int64) ([]Buyer, error)
	// LastOrderID returns the highest order id in the activity's id range
	// (see OrderID) that the database holds, in any state or failed; 0 if none.
	// A rebuilt Redis issues ids past it.
	LastOrderID(ctx context.Context, activityID int64) (int64, error)

	// ApplyOrders writes a batch of accepted grabs in one transaction and
	// returns one Outcome per request, in order. It is idempotent: a request
	// applied before yields the same outcome again and changes nothing.
	// A new order is confirmed only if the activity's remaining stock can be
	// decremented without going below zero (else ReasonSoldOut) and the user
	// holds no other order in the activity (else ReasonDuplicate).
	ApplyOrders(ctx context.Context, reqs []OrderRequest) ([]Outcome, error)
	// FailOrders records the requests as failed with the reason, unless an
	// outcome is already recorded; it returns the outcome in force for each.
	FailOrders(ctx context.Context, reqs []OrderRequest, reason string) ([]Outcome, error)
	// Order returns an order the database holds (any state but pending);
	// ENOTFOUND if the database has no outcome for it (yet).
	Order(ctx context.Context, id int64) (Order, error)

	// Load reads, in one consistent snapshot, what Redis is rebuilt from.
	// ENOTFOUND if the activity does not exist.
	Load(ctx context.Context, activityID int64) (Loaded, error)

	// Pay moves a confirmed order whose deadline lies after p.Now to paid,
	// with one conditional update. Repeated on the paid order with the same
	// key and ref it returns the order unchanged. Errors: ENOTFOUND (no
	// such order in the database, or of another user), EORDEREXPIRED
	// (expired, or confirmed past its deadline), EORDERCANCELLED,
	// ENOTPAYABLE (failed, or a sale without a payment step), EORDERPAID
	// (paid under another key), EKEYREUSED (paid under the same key with
	// another ref), EINVALID (ref or key out of bounds).
	Pay(ctx context.Context, p Payment) (Order, error)
	// Cancel moves a confirmed order of user uid (0: any user) to
	// cancelled and records its Return (remaining + 1) in one transaction.
	// Repeated on the cancelled order it returns the order unchanged.
	// Errors: ENOTFOUND, EORDERPAID, EORDEREXPIRED, ENOTCANCELLABLE (failed).
	Cancel(ctx context.Context, orderID, uid int64, now time.Time) (Order, Return, error)
	// Expire moves up to limit confirmed orders whose deadline is at or
	// before now to expired, with their Returns, in one transaction that
	// first claims the fence: if the database has seen a higher token for
	// f.Name, nothing is written and ErrFenced is returned.
	Expire(ctx context.Context, f Fence, now time.Time, limit int) ([]Return, error)
	// NextDeadline returns the earliest deadline of a confirmed order, and
	// false if none has one.
	NextDeadline(ctx context.Context) (time.Time, bool, error)
	// PendingReturns lists up to limit returns whose Redis half is not
	// recorded as done, oldest first.
	PendingReturns(ctx context.Context, limit int) ([]Return, error)
	// Restocked records that the Redis halves of these returns are done.
	Restocked(ctx context.Context, orderIDs []int64) error
	// UserOrders lists the orders of a user that the database holds
	// (failed ones included), newest first: those created before the
	// cursor (zero Cursor: from the newest), at most limit.
	UserOrders(ctx context.Context, uid int64, before Cursor, limit int) ([]Order, error)
	// StateCounts counts an activity's orders by state.
	StateCounts(ctx context.Context, activityID int64) (StateCounts, error)

	Ping(ctx context.Context) error
	Close() error
}
