// Package check evaluates the invariants of a flash sale after (or during)
// a run, straight from the database and Redis rather than through the
// service under test:
//
//	I1 no oversell      live orders (confirmed, paid) + pending <= stock;
//	                    remaining never below 0
//	I2 no duplicate     at most one live order per (activity, user); at most
//	                    one order at all where the sale forbids re-buying
//	I3 no lost order    every order id answered 200/202 ends in the database
//	I4 no phantom order every order in the database was answered to its user
//	I5 conservation     remaining + live = stock, in the database and in
//	                    Redis (where returns not yet given back to Redis
//	                    are counted as such)
//	I6 returned once    every cancelled or expired order returned its unit
//	                    exactly once, no paid order was ever returned, and
//	                    every return reached Redis
//
// plus "one order id per user" (every reply to a user named the same
// order) and "drained" (the order worker has acknowledged every accepted
// grab). The answers come from the load generator (loadgen.Report's
// OrdersByUser and UncertainUsers) or from a test that made its own calls.
//
// The SQL is plain enough for PostgreSQL, MySQL/MariaDB and SQLite alike,
// and checks duplicates with GROUP BY rather than trusting a unique index.
package check

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill"
)

// Names of the checks, in the order they are reported.
const (
	NoOversell     = "I1 no oversell"
	NoDuplicate    = "I2 no duplicate buyer"
	NoLostOrder    = "I3 no lost order"
	Drained        = "I3 drained"
	NoPhantomOrder = "I4 no phantom order"
	Conservation   = "I5 conservation"
	ReturnedOnce   = "I6 returned once"
	OneOrderID     = "one order id per user"
)

// Config says what to check.
type Config struct {
	// DB is the system of record (see Open). Required.
	DB *sql.DB
	// Redis, if set, adds the Redis side: remaining stock and the order
	// stream (pending orders, drained or not).
	Redis redis.UniversalClient
	// Prefix is the Redis key prefix; "" means the service's default.
	Prefix string
	// ActivityID is the activity to check. Required.
	ActivityID int64
	// Answers, if set, enables the checks that compare the database with
	// what users were told (I3, I4, one order id per user).
	Answers *Answers
}

// Answers is what the users were told.
type Answers struct {
	// ByUser maps each user answered 200 or 202 to the distinct order ids
	// those answers named.
	ByUser map[int64][]int64
	// Uncertain lists the users with a request of unknown outcome (a
	// timeout, a transport error, a 5xx): the service may hold an order of
	// theirs that nobody was told about.
	Uncertain []int64
}

// Run evaluates every invariant and returns the report. An error means the
// state could not be read (no such activity, database or Redis down), not
// that an invariant failed: that is in the Report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.DB == nil {
		return nil, errors.New("check: DB is required")
	}
	if cfg.ActivityID <= 0 {
		return nil, errors.New("check: ActivityID must be positive")
	}
	// Redis is read before the database, so that a check run during a
	// sale counts no unit twice: a grab still unwritten when the database
	// is read was already in the stream when Redis was, and an order the
	// database holds live was not given back before Redis was read. Read
	// the other way round, an order cancelled and its unit sold again
	// between the two reads would be counted live and pending at once (a
	// false oversell), and an order written and acknowledged between them
	// neither written nor pending (a false lost order).
	var rs *redisState
	var err error
	if cfg.Redis != nil {
		if rs, err = readRedis(ctx, cfg.Redis, cfg.Prefix, cfg.ActivityID); err != nil {
			return nil, err
		}
	}
	st, err := readDB(ctx, cfg.DB, cfg.ActivityID)
	if err != nil {
		return nil, err
	}
	rep := &Report{
		ActivityID:     cfg.ActivityID,
		Stock:          st.stock,
		DBRemaining:    st.remaining,
		Confirmed:      st.count(seckill.OrderConfirmed),
		Paid:           st.count(seckill.OrderPaid),
		Cancelled:      st.count(seckill.OrderCancelled),
		Expired:        st.count(seckill.OrderExpired),
		Failed:         int64(len(st.failed)),
		ReturnsPending: st.returnsPending,
	}
	if rs != nil {
		if rs.stockKnown {
			rep.RedisRemaining = &rs.remaining
		}
		pending := int64(len(rs.undrained))
		rep.Pending = &pending
	}
	rep.Results = []Result{
		checkOversell(st, rs),
		checkDuplicates(st),
		checkLost(st, rs, cfg.Answers),
		checkDrained(rs),
		checkPhantoms(st, cfg.Answers),
		checkConservation(st, rs),
		checkReturns(st),
		checkOneOrderID(st, cfg.Answers),
	}
	return rep, nil
}

// dbState is the database's view of one activity.
type dbState struct {
	stock, remaining int64
	rebuy            bool
	orders           map[int64]order // every order in orders, by id
	failed           map[int64]int64 // order id -> user id
	duplicates       []userCount     // users with more than one live order (any order, without rebuy)
	returns          map[int64]ret   // order_returns, by order id
	returnsPending   int64           // returns whose Redis half is not recorded as done
}

// order is a row of orders.
type order struct {
	user   int64
	status seckill.OrderStatus
	paid   bool // paid_at is set
}

// ret is a row of order_returns.
type ret struct {
	status    seckill.OrderStatus
	restocked bool
}

type userCount struct{ user, count int64 }

// live counts the orders that hold a unit.
func (st *dbState) live() int64 {
	return st.count(seckill.OrderConfirmed) + st.count(seckill.OrderPaid)
}

func (st *dbState) count(s seckill.OrderStatus) int64 {
	var n int64
	for _, o := range st.orders {
		if o.status == s {
			n++
		}
	}
	return n
}

func readDB(ctx context.Context, db *sql.DB, id int64) (*dbState, error) {
	// The activity id is an int64 formatted into the SQL: no placeholder
	// syntax to pick per engine, and nothing a caller can inject.
	a := strconv.FormatInt(id, 10)
	st := &dbState{orders: map[int64]order{}, failed: map[int64]int64{}, returns: map[int64]ret{}}
	err := db.QueryRowContext(ctx, "SELECT stock, remaining, rebuy FROM activities WHERE id = "+a).Scan(&st.stock, &st.remaining, &st.rebuy)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("check: activity %d not found in the database", id)
	}
	if err != nil {
		return nil, fmt.Errorf("check: read activity %d: %w", id, err)
	}
	err = scanRows(ctx, db, "SELECT id, user_id, status, paid_at IS NOT NULL FROM orders WHERE activity_id = "+a, func(r *sql.Rows) error {
		var oid int64
		var o order
		err := r.Scan(&oid, &o.user, &o.status, &o.paid)
		st.orders[oid] = o
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("check: read orders: %w", err)
	}
	err = scanRows(ctx, db, "SELECT order_id, user_id FROM order_failures WHERE activity_id = "+a, func(r *sql.Rows) error {
		var oid, uid int64
		err := r.Scan(&oid, &uid)
		st.failed[oid] = uid
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("check: read order failures: %w", err)
	}
	err = scanRows(ctx, db, "SELECT order_id, status, restocked_at IS NOT NULL FROM order_returns WHERE activity_id = "+a, func(r *sql.Rows) error {
		var oid int64
		var rt ret
		err := r.Scan(&oid, &rt.status, &rt.restocked)
		st.returns[oid] = rt
		if !rt.restocked {
			st.returnsPending++
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("check: read order returns: %w", err)
	}
	dup := "SELECT user_id, COUNT(*) FROM orders WHERE activity_id = " + a
	if st.rebuy {
		dup += " AND status IN ('confirmed', 'paid')"
	}
	err = scanRows(ctx, db, dup+" GROUP BY user_id HAVING COUNT(*) > 1 ORDER BY user_id", func(r *sql.Rows) error {
		var uc userCount
		err := r.Scan(&uc.user, &uc.count)
		st.duplicates = append(st.duplicates, uc)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("check: count orders per user: %w", err)
	}
	return st, nil
}

// scanRows runs q and calls scan for each row.
func scanRows(ctx context.Context, db *sql.DB, q string, scan func(*sql.Rows) error) error {
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

func checkOversell(st *dbState, rs *redisState) Result {
	live := st.live()
	over := max(live-st.stock, -st.remaining, 0)
	detail := fmt.Sprintf("%d live orders (confirmed or paid) of stock %d; db remaining %d", live, st.stock, st.remaining)
	if rs != nil {
		// An accepted grab not yet written holds a unit too: at no moment
		// may the units held exceed the stock.
		pending := int64(0)
		for oid := range rs.undrained {
			if _, written := st.orders[oid]; !written {
				if _, failed := st.failed[oid]; !failed {
					pending++
				}
			}
		}
		over = max(over, live+pending-st.stock)
		if pending > 0 {
			detail += fmt.Sprintf(", %d pending", pending)
		}
		if rs.stockKnown {
			over = max(over, -rs.remaining)
			detail += fmt.Sprintf(", redis remaining %d", rs.remaining)
		} else {
			detail += ", redis remaining stock missing"
		}
	}
	return Result{Name: NoOversell, Held: over == 0, Count: over, Detail: detail}
}

func checkDuplicates(st *dbState) Result {
	var extra int64
	for _, d := range st.duplicates {
		extra += d.count - 1
	}
	r := Result{Name: NoDuplicate, Held: len(st.duplicates) == 0, Count: extra}
	what := "live orders"
	if !st.rebuy {
		what = "orders (the sale forbids re-buying)"
	}
	if r.Held {
		r.Detail = fmt.Sprintf("%d live orders, one per user", st.live())
		if len(st.orders) > int(st.live()) {
			r.Detail += fmt.Sprintf(", %d returned", int64(len(st.orders))-st.live())
		}
		return r
	}
	ex := make([]string, 0, examples)
	for _, d := range st.duplicates[:min(len(st.duplicates), examples)] {
		ex = append(ex, fmt.Sprintf("user %d: %d", d.user, d.count))
	}
	r.Detail = fmt.Sprintf("%d users hold more than one of the %s (%d extra; %s)",
		len(st.duplicates), what, extra, strings.Join(ex, ", "))
	return r
}

func checkLost(st *dbState, rs *redisState, ans *Answers) Result {
	r := Result{Name: NoLostOrder}
	if ans == nil {
		r.Held, r.Skipped, r.Detail = true, true, "no answers given"
		return r
	}
	var answered, written, failed, pending int64
	var lost, both, stolen []int64
	for _, uid := range sortedKeys(ans.ByUser) {
		for _, oid := range ans.ByUser[uid] {
			answered++
			o, inOrders := st.orders[oid]
			fu, inFailures := st.failed[oid]
			switch {
			case inOrders && inFailures:
				both = append(both, oid)
			case inOrders && o.user != uid, inFailures && fu != uid:
				stolen = append(stolen, oid)
			case inOrders:
				written++
			case inFailures:
				failed++
			case rs != nil && rs.undrained[oid]:
				pending++
			default:
				lost = append(lost, oid)
			}
		}
	}
	bad := int64(len(lost) + len(both) + len(stolen))
	r.Held, r.Count = bad == 0, bad
	r.Detail = fmt.Sprintf("%d answered: %d written, %d failed, %d pending, %d lost", answered, written, failed, pending, len(lost))
	if rs == nil && len(lost) > 0 {
		r.Detail += " (without Redis, pending orders count as lost)"
	}
	r.Detail += exampleList("lost", lost) + exampleList("both confirmed and failed", both) +
		exampleList("held by another user", stolen)
	return r
}

func checkDrained(rs *redisState) Result {
	r := Result{Name: Drained}
	if rs == nil {
		r.Held, r.Skipped, r.Detail = true, true, "no Redis given"
		return r
	}
	n := int64(len(rs.undrained))
	r.Held, r.Count = n == 0, n
	r.Detail = fmt.Sprintf("%d stream entries, %d not yet acknowledged", rs.entries, n)
	if !rs.groupExists && rs.entries > 0 {
		r.Detail += fmt.Sprintf(" (no consumer group %q)", streamGroup)
	}
	return r
}

func checkPhantoms(st *dbState, ans *Answers) Result {
	r := Result{Name: NoPhantomOrder}
	if ans == nil {
		r.Held, r.Skipped, r.Detail = true, true, "no answers given"
		return r
	}
	type pair struct{ order, user int64 }
	told := map[pair]bool{}
	for uid, oids := range ans.ByUser {
		for _, oid := range oids {
			told[pair{oid, uid}] = true
		}
	}
	uncertain := make(map[int64]bool, len(ans.Uncertain))
	for _, uid := range ans.Uncertain {
		uncertain[uid] = true
	}
	var answered, explained int64
	var phantoms []int64
	judge := func(orders map[int64]int64) {
		for _, oid := range sortedKeys(orders) {
			uid := orders[oid]
			switch {
			case told[pair{oid, uid}]:
				answered++
			case uncertain[uid]:
				explained++
			default:
				phantoms = append(phantoms, oid)
			}
		}
	}
	written := make(map[int64]int64, len(st.orders))
	for oid, o := range st.orders {
		written[oid] = o.user
	}
	judge(written)
	judge(st.failed)
	n := int64(len(phantoms))
	r.Held, r.Count = n == 0, n
	r.Detail = fmt.Sprintf("%d orders in the database: %d answered, %d explained by requests of unknown outcome, %d phantom",
		len(st.orders)+len(st.failed), answered, explained, n) + exampleList("phantom", phantoms)
	return r
}

func checkConservation(st *dbState, rs *redisState) Result {
	live := st.live()
	r := Result{Name: Conservation}
	dbDiff := st.remaining + live - st.stock
	r.Count = abs(dbDiff)
	r.Detail = fmt.Sprintf("db: %d remaining + %d live = %d of stock %d", st.remaining, live, st.remaining+live, st.stock)
	r.Held = dbDiff == 0
	switch {
	case rs == nil:
	case !rs.stockKnown:
		r.Held = false
		r.Count++
		r.Detail += "; redis: remaining stock missing"
	case len(rs.undrained) > 0:
		r.Detail += fmt.Sprintf("; redis: not checked until drained (%d pending)", len(rs.undrained))
	default:
		// A return whose Redis half is still to come holds its unit out
		// of Redis' stock until the expiry job gives it back.
		diff := rs.remaining + live + st.returnsPending - st.stock
		r.Held = r.Held && diff == 0
		r.Count += abs(diff)
		r.Detail += fmt.Sprintf("; redis: %d remaining + %d live", rs.remaining, live)
		if st.returnsPending > 0 {
			r.Detail += fmt.Sprintf(" + %d returns not yet in redis", st.returnsPending)
		}
		r.Detail += fmt.Sprintf(" = %d", rs.remaining+live+st.returnsPending)
	}
	return r
}

// checkReturns verifies the order state machine's bookkeeping: each
// cancelled or expired order has exactly one return of its kind, no other
// order has one, only paid orders carry a payment, and (with Redis) every
// return reached Redis.
func checkReturns(st *dbState) Result {
	r := Result{Name: ReturnedOnce}
	var missing, stray, paidWrong []int64
	var returned int64
	for _, oid := range sortedKeys(st.orders) {
		o := st.orders[oid]
		rt, has := st.returns[oid]
		switch {
		case o.status == seckill.OrderCancelled || o.status == seckill.OrderExpired:
			returned++
			if !has || rt.status != o.status {
				missing = append(missing, oid)
			}
		case has:
			stray = append(stray, oid) // a live or paid order gave its unit back
		}
		if o.paid != (o.status == seckill.OrderPaid) {
			paidWrong = append(paidWrong, oid)
		}
	}
	for _, oid := range sortedKeys(st.returns) {
		if _, ok := st.orders[oid]; !ok {
			stray = append(stray, oid)
		}
	}
	n := int64(len(missing) + len(stray) + len(paidWrong))
	r.Held, r.Count = n == 0, n
	r.Detail = fmt.Sprintf("%d paid, %d cancelled, %d expired: %d returns for %d returned orders",
		st.count(seckill.OrderPaid), st.count(seckill.OrderCancelled), st.count(seckill.OrderExpired), len(st.returns), returned)
	if st.returnsPending > 0 {
		r.Detail += fmt.Sprintf(", %d not yet given back to redis", st.returnsPending)
	}
	r.Detail += exampleList("returned without a return", missing) + exampleList("returns of orders not returned", stray) +
		exampleList("payment inconsistent with state", paidWrong)
	return r
}

// checkOneOrderID: every reply to a user named the same order, except that
// a user whose order was cancelled or expired may buy again where the sale
// allows it: then the replies name that order and one later one.
func checkOneOrderID(st *dbState, ans *Answers) Result {
	r := Result{Name: OneOrderID}
	if ans == nil {
		r.Held, r.Skipped, r.Detail = true, true, "no answers given"
		return r
	}
	var split []int64 // users told more than one order id
	owner := map[int64]int64{}
	var shared []int64 // order ids told to more than one user
	for _, uid := range sortedKeys(ans.ByUser) {
		oids := slices.Compact(slices.Sorted(slices.Values(ans.ByUser[uid])))
		unreturned := 0
		for _, oid := range oids {
			if o, ok := st.orders[oid]; !ok || !st.rebuy || (o.status != seckill.OrderCancelled && o.status != seckill.OrderExpired) {
				unreturned++
			}
		}
		if unreturned > 1 {
			split = append(split, uid)
		}
		for _, oid := range oids {
			if prev, ok := owner[oid]; ok && prev != uid {
				shared = append(shared, oid)
			}
			owner[oid] = uid
		}
	}
	n := int64(len(split) + len(shared))
	r.Held, r.Count = n == 0, n
	r.Detail = fmt.Sprintf("%d users answered, %d told more than one order id (returned ones apart), %d order ids told to more than one user",
		len(ans.ByUser), len(split), len(shared)) + exampleList("users", split) + exampleList("orders", shared)
	return r
}

// examples bounds the ids quoted in a detail.
const examples = 5

func exampleList(what string, ids []int64) string {
	if len(ids) == 0 {
		return ""
	}
	s := make([]string, 0, examples+1)
	for _, id := range ids[:min(len(ids), examples)] {
		s = append(s, strconv.FormatInt(id, 10))
	}
	if len(ids) > examples {
		s = append(s, "...")
	}
	return "; " + what + ": " + strings.Join(s, ", ")
}

func sortedKeys[V any](m map[int64]V) []int64 {
	return slices.Sorted(maps.Keys(m))
}

func abs(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}
