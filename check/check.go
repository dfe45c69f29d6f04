// Package check evaluates the invariants of a flash sale after (or during)
// a run, straight from the database and Redis rather than through the
// service under test:
//
//	I1 no oversell      confirmed orders <= stock; remaining never below 0
//	I2 no duplicate     at most one confirmed order per (activity, user)
//	I3 no lost order    every order id answered 200/202 ends confirmed or failed
//	I4 no phantom order every order in the database was answered to its user
//	I5 conservation     remaining + confirmed = stock, in the database and in Redis
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
)

// Names of the checks, in the order they are reported.
const (
	NoOversell     = "I1 no oversell"
	NoDuplicate    = "I2 no duplicate buyer"
	NoLostOrder    = "I3 no lost order"
	Drained        = "I3 drained"
	NoPhantomOrder = "I4 no phantom order"
	Conservation   = "I5 conservation"
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
	st, err := readDB(ctx, cfg.DB, cfg.ActivityID)
	if err != nil {
		return nil, err
	}
	var rs *redisState
	if cfg.Redis != nil {
		if rs, err = readRedis(ctx, cfg.Redis, cfg.Prefix, cfg.ActivityID); err != nil {
			return nil, err
		}
	}
	rep := &Report{
		ActivityID:  cfg.ActivityID,
		Stock:       st.stock,
		DBRemaining: st.remaining,
		Confirmed:   int64(len(st.confirmed)),
		Failed:      int64(len(st.failed)),
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
		checkOneOrderID(cfg.Answers),
	}
	return rep, nil
}

// dbState is the database's view of one activity.
type dbState struct {
	stock, remaining int64
	confirmed        map[int64]int64 // order id -> user id
	failed           map[int64]int64 // order id -> user id
	duplicates       []userCount     // users with more than one confirmed order
}

type userCount struct{ user, count int64 }

func readDB(ctx context.Context, db *sql.DB, id int64) (*dbState, error) {
	// The activity id is an int64 formatted into the SQL: no placeholder
	// syntax to pick per engine, and nothing a caller can inject.
	a := strconv.FormatInt(id, 10)
	st := &dbState{}
	err := db.QueryRowContext(ctx, "SELECT stock, remaining FROM activities WHERE id = "+a).Scan(&st.stock, &st.remaining)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("check: activity %d not found in the database", id)
	}
	if err != nil {
		return nil, fmt.Errorf("check: read activity %d: %w", id, err)
	}
	if st.confirmed, err = idPairs(ctx, db, "SELECT id, user_id FROM orders WHERE activity_id = "+a); err != nil {
		return nil, fmt.Errorf("check: read orders: %w", err)
	}
	if st.failed, err = idPairs(ctx, db, "SELECT order_id, user_id FROM order_failures WHERE activity_id = "+a); err != nil {
		return nil, fmt.Errorf("check: read order failures: %w", err)
	}
	rows, err := db.QueryContext(ctx, "SELECT user_id, COUNT(*) FROM orders WHERE activity_id = "+a+
		" GROUP BY user_id HAVING COUNT(*) > 1 ORDER BY user_id")
	if err != nil {
		return nil, fmt.Errorf("check: count orders per user: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var uc userCount
		if err := rows.Scan(&uc.user, &uc.count); err != nil {
			return nil, fmt.Errorf("check: count orders per user: %w", err)
		}
		st.duplicates = append(st.duplicates, uc)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("check: count orders per user: %w", err)
	}
	return st, nil
}

// idPairs reads a two-column query of (order id, user id).
func idPairs(ctx context.Context, db *sql.DB, q string) (map[int64]int64, error) {
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	m := map[int64]int64{}
	for rows.Next() {
		var oid, uid int64
		if err := rows.Scan(&oid, &uid); err != nil {
			return nil, err
		}
		m[oid] = uid
	}
	return m, rows.Err()
}

func checkOversell(st *dbState, rs *redisState) Result {
	confirmed := int64(len(st.confirmed))
	over := max(confirmed-st.stock, -st.remaining, 0)
	detail := fmt.Sprintf("%d confirmed of stock %d; db remaining %d", confirmed, st.stock, st.remaining)
	if rs != nil {
		if rs.stockKnown {
			over = max(over, -rs.remaining)
			detail += fmt.Sprintf(", redis remaining %d", rs.remaining)
		} else {
			detail += ", redis stock key missing"
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
	if r.Held {
		r.Detail = fmt.Sprintf("%d confirmed orders, one per user", len(st.confirmed))
		return r
	}
	ex := make([]string, 0, examples)
	for _, d := range st.duplicates[:min(len(st.duplicates), examples)] {
		ex = append(ex, fmt.Sprintf("user %d: %d", d.user, d.count))
	}
	r.Detail = fmt.Sprintf("%d users hold more than one confirmed order (%d extra orders; %s)",
		len(st.duplicates), extra, strings.Join(ex, ", "))
	return r
}

func checkLost(st *dbState, rs *redisState, ans *Answers) Result {
	r := Result{Name: NoLostOrder}
	if ans == nil {
		r.Held, r.Skipped, r.Detail = true, true, "no answers given"
		return r
	}
	var answered, confirmed, failed, pending int64
	var lost, both, stolen []int64
	for _, uid := range sortedKeys(ans.ByUser) {
		for _, oid := range ans.ByUser[uid] {
			answered++
			cu, inOrders := st.confirmed[oid]
			fu, inFailures := st.failed[oid]
			switch {
			case inOrders && inFailures:
				both = append(both, oid)
			case inOrders && cu != uid, inFailures && fu != uid:
				stolen = append(stolen, oid)
			case inOrders:
				confirmed++
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
	r.Detail = fmt.Sprintf("%d answered: %d confirmed, %d failed, %d pending, %d lost", answered, confirmed, failed, pending, len(lost))
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
	judge(st.confirmed)
	judge(st.failed)
	n := int64(len(phantoms))
	r.Held, r.Count = n == 0, n
	r.Detail = fmt.Sprintf("%d orders in the database: %d answered, %d explained by requests of unknown outcome, %d phantom",
		len(st.confirmed)+len(st.failed), answered, explained, n) + exampleList("phantom", phantoms)
	return r
}

func checkConservation(st *dbState, rs *redisState) Result {
	confirmed := int64(len(st.confirmed))
	r := Result{Name: Conservation}
	dbDiff := st.remaining + confirmed - st.stock
	r.Count = abs(dbDiff)
	r.Detail = fmt.Sprintf("db: %d remaining + %d confirmed = %d of stock %d", st.remaining, confirmed, st.remaining+confirmed, st.stock)
	r.Held = dbDiff == 0
	switch {
	case rs == nil:
	case !rs.stockKnown:
		r.Held = false
		r.Count++
		r.Detail += "; redis: stock key missing"
	case len(rs.undrained) > 0:
		r.Detail += fmt.Sprintf("; redis: not checked until drained (%d pending)", len(rs.undrained))
	default:
		diff := rs.remaining + confirmed - st.stock
		r.Held = r.Held && diff == 0
		r.Count += abs(diff)
		r.Detail += fmt.Sprintf("; redis: %d remaining + %d confirmed = %d", rs.remaining, confirmed, rs.remaining+confirmed)
	}
	return r
}

func checkOneOrderID(ans *Answers) Result {
	r := Result{Name: OneOrderID}
	if ans == nil {
		r.Held, r.Skipped, r.Detail = true, true, "no answers given"
		return r
	}
	var split []int64 // users told more than one order id
	owner := map[int64]int64{}
	var shared []int64 // order ids told to more than one user
	for _, uid := range sortedKeys(ans.ByUser) {
		oids := ans.ByUser[uid]
		if len(slices.Compact(slices.Sorted(slices.Values(oids)))) > 1 {
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
	r.Detail = fmt.Sprintf("%d users answered, %d told more than one order id, %d order ids told to more than one user",
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
