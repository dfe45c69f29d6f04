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
// repeating, so locals only grow. Redis stores and returns only the local
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
}

// Validate reports the first field that makes a an invalid new activity.
func (a *Activity) Validate() error {
	switch {
	case a.Name == "":
		return Errorf(EINVALID, "name must not be empty")
	case len(a.Name) > 200:
		return Errorf(EINVALID, "name must be at most 200 bytes")
	case !utf8.ValidString(a.Name) || strings.ContainsFunc(a.Name, unicode.IsControl):
		return Errorf(EINVALID, "name must be UTF-8 text without control characters")
	case a.Stock < 1:
		return Errorf(EINVALID, "stock must be at least 1")
	case a.Stock > MaxStock:
		return Errorf(EINVALID, "stock must be at most %d", MaxStock)
	case a.StartsAt.IsZero() || a.EndsAt.IsZero():
		return Errorf(EINVALID, "starts_at and ends_at are required")
	case !a.EndsAt.After(a.StartsAt):
		return Errorf(EINVALID, "ends_at must be after starts_at")
	case a.EndsAt.Sub(a.StartsAt) > MaxSaleWindow:
		return Errorf(EINVALID, "a sale may last at most 366 days")
	case a.StartsAt.Year() < 2000 || a.EndsAt.Year() > 9999:
		return Errorf(EINVALID, "starts_at and ends_at must lie between the years 2000 and 9999")
	}
	return nil
}

// OrderStatus is what a buyer is told about an order.
type OrderStatus string

const (
	// OrderPending: Redis accepted the grab; the order is queued for the database.
	OrderPending OrderStatus = "pending"
	// OrderConfirmed: the order is committed in the database.
	OrderConfirmed OrderStatus = "confirmed"
	// OrderFailed: the order could not be created; its stock was given back.
	OrderFailed OrderStatus = "failed"
)

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
	// Buyers lists the confirmed orders of an activity (to rebuild Redis).
	Buyers(ctx context.Context, activityID int64) ([]Buyer, error)
	// LastOrderID returns the highest order id in the activity's id range
	// (see OrderID) that the database holds, confirmed or failed; 0 if none.
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
	// Order returns a confirmed or failed order; ENOTFOUND if the database
	// has no outcome for it (yet).
	Order(ctx context.Context, id int64) (Order, error)

	Ping(ctx context.Context) error
	Close() error
}
