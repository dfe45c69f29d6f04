// Package sqlite implements seckill.Store on SQLite with modernc.org/sqlite
// (pure Go, no cgo).
//
// Every transaction begins IMMEDIATE, taking SQLite's single write lock at
// once, so write transactions run one at a time (across processes too, with
// a busy timeout) and what ApplyOrders reads cannot change before it
// commits. File databases use WAL, so reads go on while a batch is written.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"modernc.org/sqlite"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/store/internal/sqlstore"
)

//go:embed migrations/*.sql
var migrations embed.FS

// ping opens the first connection. Its pragmas include the switch to WAL,
// which needs the database to itself and fails at once with SQLITE_BUSY,
// without waiting on the busy timeout, while another process opens the same
// new file: so it is retried for up to BusyTimeout.
func ping(ctx context.Context, db *sql.DB) error {
	deadline := time.Now().Add(BusyTimeout)
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		err := db.PingContext(ctx)
		if err == nil || !strings.Contains(err.Error(), "SQLITE_BUSY") || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
	}
}

// BusyTimeout is how long a statement waits for another connection's (or
// process's) write lock before it fails with SQLITE_BUSY.
const BusyTimeout = 10 * time.Second

// timeFormat is how times are stored: UTC text that SQLite's date functions
// understand and that sorts like the times it holds.
const timeFormat = "2006-01-02 15:04:05.000"

// Store is a seckill.Store on an SQLite database.
type Store struct {
	db *sql.DB
}

var _ seckill.Store = (*Store)(nil)

// DSN turns a sqlite:// URL into the driver's data source name, with the
// store's own pragmas: the busy timeout, foreign keys, WAL and
// _txlock=immediate (see Open for the URL forms).
func DSN(url string) (string, error) {
	path, params, err := parseURL(url)
	if err != nil {
		return "", err
	}
	dsn := path + fmt.Sprintf("?_pragma=busy_timeout(%d)&_pragma=foreign_keys(1)&_pragma=journal_mode(WAL)&_txlock=immediate",
		BusyTimeout.Milliseconds())
	if params != "" {
		dsn += "&" + params
	}
	return dsn, nil
}

// Open opens the database at url, creating the file if needed, and applies
// the migrations it lacks. url is sqlite:///abs/path.db, sqlite://rel/path.db
// (relative to the working directory) or sqlite://:memory:, optionally with
// more driver parameters (?_pragma=synchronous(NORMAL)); the busy timeout,
// foreign keys, WAL and _txlock=immediate are the store's own. An in-memory
// database lives on one connection, which the store keeps open until Close.
func Open(ctx context.Context, url string) (*Store, error) {
	path, _, err := parseURL(url)
	if err != nil {
		return nil, err
	}
	dsn, err := DSN(url)
	if err != nil {
		return nil, err
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	if path == ":memory:" {
		// Each connection to :memory: is a database of its own.
		db.SetMaxOpenConns(1)
	}
	if err := ping(ctx, db); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlite: cannot open %s: %w", path, err)
	}
	s := &Store{db: db}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlite: migrate %s: %w", path, err)
	}
	return s, nil
}

// parseURL splits a sqlite:// URL into the database path and the driver
// parameters.
func parseURL(rawURL string) (path, params string, err error) {
	const want = "want sqlite:///abs/path.db, sqlite://relative/path.db or sqlite://:memory:"
	rest, ok := strings.CutPrefix(rawURL, "sqlite://")
	if !ok {
		return "", "", fmt.Errorf("sqlite: bad url %q: %s", rawURL, want)
	}
	rest, params, _ = strings.Cut(rest, "?")
	if path, err = url.PathUnescape(rest); err != nil {
		return "", "", fmt.Errorf("sqlite: bad url %q: %v", rawURL, err)
	}
	if path == "" {
		return "", "", fmt.Errorf("sqlite: bad url %q: no path (%s)", rawURL, want)
	}
	if _, err := url.ParseQuery(params); err != nil {
		return "", "", fmt.Errorf("sqlite: bad url %q: parameters: %v", rawURL, err)
	}
	return path, params, nil
}

// migrate applies the missing migrations in one transaction; it begins
// IMMEDIATE, so processes starting together apply each exactly once.
func (s *Store) migrate(ctx context.Context) error {
	ms, err := sqlstore.Migrations(migrations, "migrations")
	if err != nil {
		return err
	}
	return s.inTx(ctx, func(tx *sql.Tx) error {
		const qTable = `
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    TEXT PRIMARY KEY,
    applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
)`
		if _, err := tx.ExecContext(ctx, qTable); err != nil {
			return err
		}
		var applied []string
		const qApplied = `SELECT version FROM schema_migrations`
		err := sqlstore.Query(ctx, tx, qApplied, nil, func(rows *sql.Rows) error {
			var v string
			err := rows.Scan(&v)
			applied = append(applied, v)
			return err
		})
		if err != nil {
			return err
		}
		for _, m := range ms {
			if slices.Contains(applied, m.Version) {
				continue
			}
			if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
				return fmt.Errorf("%s: %w", m.Version, err)
			}
			const qRecord = `INSERT INTO schema_migrations (version) VALUES (?)`
			if _, err := tx.ExecContext(ctx, qRecord, m.Version); err != nil {
				return err
			}
		}
		return nil
	})
}

// DB returns the database handle, for tools and tests that read the tables.
func (s *Store) DB() *sql.DB { return s.db }

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.db.PingContext(ctx); err != nil {
		return fmt.Errorf("sqlite: ping: %w", err)
	}
	return nil
}

// Close closes the database; an in-memory database is gone afterwards.
func (s *Store) Close() error { return s.db.Close() }

// CreateActivity validates and inserts a with Remaining = Stock, and sets its
// ID and Remaining. StartsAt and EndsAt are set to what is stored: UTC,
// truncated to the millisecond.
func (s *Store) CreateActivity(ctx context.Context, a *seckill.Activity) error {
	if err := a.Validate(); err != nil {
		return err
	}
	a.StartsAt, a.EndsAt = sqlstore.Millis(a.StartsAt), sqlstore.Millis(a.EndsAt)
	const q = `INSERT INTO activities (name, stock, remaining, starts_at, ends_at) VALUES (?, ?, ?, ?, ?)`
	var id int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, q, a.Name, a.Stock, a.Stock, text(a.StartsAt), text(a.EndsAt))
		if err == nil {
			id, err = res.LastInsertId()
		}
		if err != nil {
			return fmt.Errorf("sqlite: create activity: %w", err)
		}
		return sqlstore.CheckActivityID(id)
	})
	if err != nil {
		return err
	}
	a.ID, a.Remaining = id, a.Stock
	return nil
}

// text formats t as stored.
func text(t time.Time) string { return t.UTC().Format(timeFormat) }

// stamp scans a time stored as text into *stamp.
type stamp time.Time

func (s *stamp) Scan(v any) error {
	str, ok := v.(string)
	if !ok {
		return fmt.Errorf("time column holds %T, want text", v)
	}
	// Parsing accepts any number of fractional digits, or none.
	t, err := time.Parse(time.DateTime, str)
	if err != nil {
		return err
	}
	*s = stamp(t)
	return nil
}

const activityColumns = `id, name, stock, remaining, starts_at, ends_at`

type scanner interface{ Scan(dest ...any) error }

func scanActivity(row scanner) (seckill.Activity, error) {
	var a seckill.Activity
	err := row.Scan(&a.ID, &a.Name, &a.Stock, &a.Remaining, (*stamp)(&a.StartsAt), (*stamp)(&a.EndsAt))
	return a, err
}

// Activity returns the activity; ENOTFOUND if there is none.
func (s *Store) Activity(ctx context.Context, id int64) (seckill.Activity, error) {
	const q = `SELECT ` + activityColumns + ` FROM activities WHERE id = ?`
	a, err := scanActivity(s.db.QueryRowContext(ctx, q, id))
	if errors.Is(err, sql.ErrNoRows) {
		return seckill.Activity{}, seckill.Errorf(seckill.ENOTFOUND, "activity %d not found", id)
	} else if err != nil {
		return seckill.Activity{}, fmt.Errorf("sqlite: activity %d: %w", id, err)
	}
	return a, nil
}

// Activities lists the activities with ends_at >= since, by id.
func (s *Store) Activities(ctx context.Context, since time.Time) ([]seckill.Activity, error) {
	const q = `SELECT ` + activityColumns + ` FROM activities WHERE ends_at >= ? ORDER BY id`
	rows, err := s.db.QueryContext(ctx, q, text(sqlstore.CeilMillis(since)))
	if err != nil {
		return nil, fmt.Errorf("sqlite: activities: %w", err)
	}
	defer rows.Close()
	var as []seckill.Activity
	for rows.Next() {
		a, err := scanActivity(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: activities: %w", err)
		}
		as = append(as, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: activities: %w", err)
	}
	return as, nil
}

// Buyers lists the confirmed orders of the activity, by order id.
func (s *Store) Buyers(ctx context.Context, activityID int64) ([]seckill.Buyer, error) {
	const q = `SELECT user_id, id FROM orders WHERE activity_id = ? ORDER BY id`
	rows, err := s.db.QueryContext(ctx, q, activityID)
	if err != nil {
		return nil, fmt.Errorf("sqlite: buyers of activity %d: %w", activityID, err)
	}
	defer rows.Close()
	var bs []seckill.Buyer
	for rows.Next() {
		var b seckill.Buyer
		if err := rows.Scan(&b.UserID, &b.OrderID); err != nil {
			return nil, fmt.Errorf("sqlite: buyers of activity %d: %w", activityID, err)
		}
		bs = append(bs, b)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: buyers of activity %d: %w", activityID, err)
	}
	return bs, nil
}

// LastOrderID returns the highest order id of the activity's range,
// confirmed or failed; 0 if none.
func (s *Store) LastOrderID(ctx context.Context, activityID int64) (int64, error) {
	id, err := sqlstore.LastOrderID(activityID, false, func(q string, args ...any) sqlstore.Row {
		return s.db.QueryRowContext(ctx, q, args...)
	})
	if err != nil {
		return 0, fmt.Errorf("sqlite: last order id of activity %d: %w", activityID, err)
	}
	return id, nil
}

// Order returns the confirmed or failed order; ENOTFOUND if there is neither.
func (s *Store) Order(ctx context.Context, id int64) (seckill.Order, error) {
	const q = `
SELECT 1 AS rank, activity_id, user_id, status, '' AS reason, created_at FROM orders WHERE id = ?1
UNION ALL
SELECT 2, activity_id, user_id, 'failed', reason, created_at FROM order_failures WHERE order_id = ?1
ORDER BY rank
LIMIT 1`
	o := seckill.Order{ID: id}
	var rank int
	err := s.db.QueryRowContext(ctx, q, id).Scan(&rank, &o.ActivityID, &o.UserID, &o.Status, &o.Reason, (*stamp)(&o.CreatedAt))
	if errors.Is(err, sql.ErrNoRows) {
		return seckill.Order{}, seckill.Errorf(seckill.ENOTFOUND, "order %d not found", id)
	} else if err != nil {
		return seckill.Order{}, fmt.Errorf("sqlite: order %d: %w", id, err)
	}
	return o, nil
}

// ApplyOrders writes the batch in one transaction, rerun if the database
// stays locked by another process beyond BusyTimeout. A request for an
// activity that does not exist fails with ReasonSoldOut, so that one bad
// message cannot block its batch.
func (s *Store) ApplyOrders(ctx context.Context, reqs []seckill.OrderRequest) ([]seckill.Outcome, error) {
	out, err := s.batch(ctx, reqs, true, sqlstore.Apply)
	if err != nil {
		return nil, fmt.Errorf("sqlite: apply orders: %w", err)
	}
	return out, nil
}

// FailOrders records the requests without an outcome as failed with reason.
func (s *Store) FailOrders(ctx context.Context, reqs []seckill.OrderRequest, reason string) ([]seckill.Outcome, error) {
	if err := sqlstore.ValidReason(reason); err != nil {
		return nil, err
	}
	out, err := s.batch(ctx, reqs, false, sqlstore.FailWith(reason))
	if err != nil {
		return nil, fmt.Errorf("sqlite: fail orders: %w", err)
	}
	return out, nil
}

// batch runs one ApplyOrders or FailOrders transaction (sqlstore.Batch);
// holders says whether to read the users' existing orders.
func (s *Store) batch(ctx context.Context, reqs []seckill.OrderRequest, holders bool, plan sqlstore.Planner) ([]seckill.Outcome, error) {
	return sqlstore.Batch(ctx, reqs, retryable,
		func(fn func(*sql.Tx) error) error { return s.inTx(ctx, fn) },
		func(tx *sql.Tx, chunk []seckill.OrderRequest) (*sqlstore.Facts, error) {
			return read(ctx, tx, chunk, holders)
		},
		plan,
		func(tx *sql.Tx, p sqlstore.Plan) error { return write(ctx, tx, p) })
}

// inTx runs fn in a transaction, which begins IMMEDIATE (see Open).
func (s *Store) inTx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// read reads what the database holds about reqs. The transaction holds the
// write lock, so nothing changes it before commit. Holders are read only if
// holders is set.
func read(ctx context.Context, tx *sql.Tx, reqs []seckill.OrderRequest, holders bool) (*sqlstore.Facts, error) {
	f := sqlstore.NewFacts()
	activities := sqlstore.ActivityIDs(reqs)

	const qRemaining = `SELECT id, remaining FROM activities WHERE id IN (%s)`
	err := sqlstore.Query(ctx, tx, fmt.Sprintf(qRemaining, sqlstore.Params(len(activities))), sqlstore.Args(activities), func(rows *sql.Rows) error {
		var id, remaining int64
		if err := rows.Scan(&id, &remaining); err != nil {
			return err
		}
		f.Remaining[id] = remaining
		return nil
	})
	if err != nil {
		return nil, err
	}

	const qOutcomes = `
SELECT id, 'confirmed', '', 0 FROM orders WHERE id IN (%[1]s)
UNION ALL
SELECT order_id, 'failed', reason, coalesce(existing_order_id, 0) FROM order_failures WHERE order_id IN (%[1]s)`
	ids := sqlstore.Args(sqlstore.OrderIDs(reqs))
	err = sqlstore.Query(ctx, tx, fmt.Sprintf(qOutcomes, sqlstore.Params(len(ids))), append(ids, ids...), func(rows *sql.Rows) error {
		var id int64
		var o seckill.Outcome
		if err := rows.Scan(&id, &o.Status, &o.Reason, &o.ExistingOrderID); err != nil {
			return err
		}
		f.Outcomes[id] = o
		return nil
	})
	if err != nil {
		return nil, err
	}

	if !holders {
		return f, nil
	}
	const qHolders = `SELECT user_id, id FROM orders WHERE activity_id = ? AND user_id IN (%s)`
	for _, a := range activities {
		users := sqlstore.Args(sqlstore.Users(reqs, a))
		err := sqlstore.Query(ctx, tx, fmt.Sprintf(qHolders, sqlstore.Params(len(users))), append([]any{a}, users...), func(rows *sql.Rows) error {
			var user, id int64
			if err := rows.Scan(&user, &id); err != nil {
				return err
			}
			f.Holders[sqlstore.Key{ActivityID: a, UserID: user}] = id
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return f, nil
}

// write carries out p. Every statement must affect exactly the rows planned;
// anything else is a bug or a change made behind the store's back, and the
// whole transaction is rerun.
func write(ctx context.Context, tx *sql.Tx, p sqlstore.Plan) error {
	// The condition never lets remaining go below zero, whatever the plan
	// says; the CHECK constraint would refuse it too.
	const qTake = `UPDATE activities SET remaining = remaining - ?1 WHERE id = ?2 AND remaining >= ?1`
	for _, t := range p.Take {
		if err := exec(ctx, tx, 1, qTake, t.N, t.ActivityID); err != nil {
			return err
		}
	}

	if n := len(p.Confirm); n > 0 {
		const qConfirm = `
INSERT INTO orders (id, activity_id, user_id, status, created_at)
VALUES %s
ON CONFLICT DO NOTHING`
		vals := make([]any, 0, 4*n)
		for _, r := range p.Confirm {
			vals = append(vals, r.OrderID, r.ActivityID, r.UserID, text(r.CreatedAt))
		}
		if err := exec(ctx, tx, n, fmt.Sprintf(qConfirm, sqlstore.Rows("(?, ?, ?, 'confirmed', ?)", n)), vals...); err != nil {
			return err
		}
	}

	if n := len(p.Fail); n > 0 {
		const qFail = `
INSERT INTO order_failures (order_id, activity_id, user_id, reason, existing_order_id, created_at)
VALUES %s
ON CONFLICT DO NOTHING`
		vals := make([]any, 0, 6*n)
		for _, f := range p.Fail {
			existing := sql.NullInt64{Int64: f.ExistingOrderID, Valid: f.ExistingOrderID != 0}
			vals = append(vals, f.Req.OrderID, f.Req.ActivityID, f.Req.UserID, f.Reason, existing, text(f.Req.CreatedAt))
		}
		if err := exec(ctx, tx, n, fmt.Sprintf(qFail, sqlstore.Rows("(?, ?, ?, ?, ?, ?)", n)), vals...); err != nil {
			return err
		}
	}
	return nil
}

// exec runs a statement that must affect want rows.
func exec(ctx context.Context, tx *sql.Tx, want int, q string, args ...any) error {
	res, err := tx.ExecContext(ctx, q, args...)
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n != int64(want) {
		return fmt.Errorf("%w: %d rows affected, want %d", sqlstore.ErrConflict, n, want)
	}
	return nil
}

// query runs q and calls scan for each row.
// retryable reports the errors after which rerunning the transaction can
// succeed: SQLITE_BUSY and SQLITE_LOCKED (another connection or process
// held the database longer than BusyTimeout).
func retryable(err error) bool {
	var e *sqlite.Error
	if !errors.As(err, &e) {
		return false
	}
	code := e.Code() & 0xff
	return code == 5 || code == 6
}
