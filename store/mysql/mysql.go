// Package mysql implements seckill.Store on MySQL 8 and MariaDB 10.6+ with
// go-sql-driver/mysql.
//
// ApplyOrders and FailOrders run at READ COMMITTED and lock the rows of the
// batch's activities first (SELECT ... FOR UPDATE, in id order), so
// transactions that touch the same activity run one after the other and
// every later read sees what the previous one committed. Statements use
// client-side parameter interpolation (one round trip each, unless the URL
// sets interpolateParams) and multi-row IN lists and VALUES, so a batch takes
// about ten round trips whatever its size.
package mysql

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/store/internal/sqlstore"
)

//go:embed migrations/*.sql
var migrations embed.FS

// DefaultConnectTimeout bounds dialling when the URL has no timeout.
const DefaultConnectTimeout = 10 * time.Second

// Store is a seckill.Store on a MySQL or MariaDB database.
type Store struct {
	db *sql.DB
}

var _ seckill.Store = (*Store)(nil)

// Open connects to the database at url, pings it, and applies the migrations
// it lacks. See Config for the form of url.
func Open(ctx context.Context, url string) (*Store, error) {
	cfg, err := Config(url)
	if err != nil {
		return nil, err
	}
	connector, err := gomysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("mysql: %w", err)
	}
	db := sql.OpenDB(connector)
	db.SetMaxIdleConns(16)
	db.SetConnMaxIdleTime(5 * time.Minute)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("mysql: cannot reach database %s at %s: %w", cfg.DBName, cfg.Addr, err)
	}
	if err := migrate(ctx, cfg); err != nil {
		db.Close()
		return nil, fmt.Errorf("mysql: migrate: %w", err)
	}
	return &Store{db: db}, nil
}

// Config turns mysql://user:pass@host[:port]/db?params into the driver's
// configuration (the DSN user:pass@tcp(host:port)/db?params). The port
// defaults to 3306; params are the driver's DSN parameters, or server
// variables. The store needs parseTime=true and loc=UTC, which are set
// whatever params say; time_zone defaults to '+00:00', interpolateParams
// to true, and timeout (dialling) to DefaultConnectTimeout.
func Config(rawURL string) (*gomysql.Config, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // url.Error repeats the URL, password included
		}
		return nil, fmt.Errorf("mysql: bad url: %v", err)
	}
	if u.Scheme != "mysql" {
		return nil, fmt.Errorf("mysql: bad url: scheme is %q, want mysql://user:pass@host:port/db", u.Scheme)
	}
	if u.Hostname() == "" {
		return nil, fmt.Errorf("mysql: bad url %s: no host (want mysql://user:pass@host:port/db)", u.Redacted())
	}
	dbName := strings.TrimPrefix(u.Path, "/")
	if dbName == "" || strings.Contains(dbName, "/") {
		return nil, fmt.Errorf("mysql: bad url %s: no database name (want mysql://user:pass@host:port/db)", u.Redacted())
	}
	// Only the parameters go through the driver's parser; the rest is set
	// field by field, so that no character of a password can confuse it.
	cfg, err := gomysql.ParseDSN("/?" + u.RawQuery)
	if err != nil {
		return nil, fmt.Errorf("mysql: bad url parameters: %w", err)
	}
	cfg.Net = "tcp"
	cfg.Addr = u.Host
	if u.Port() == "" {
		cfg.Addr = net.JoinHostPort(u.Hostname(), "3306")
	}
	cfg.DBName = dbName
	cfg.User = u.User.Username()
	cfg.Passwd, _ = u.User.Password()
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	if cfg.Params == nil {
		cfg.Params = make(map[string]string)
	}
	if _, ok := cfg.Params["time_zone"]; !ok {
		cfg.Params["time_zone"] = "'+00:00'"
	}
	if !u.Query().Has("interpolateParams") {
		cfg.InterpolateParams = true
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultConnectTimeout
	}
	return cfg, nil
}

// migrate applies the missing migrations while holding a named lock, so
// processes starting together apply each exactly once. MySQL commits DDL
// at once, so a migration is recorded after it ran; its statements must be
// safe to run again should it fail halfway.
func migrate(ctx context.Context, cfg *gomysql.Config) error {
	ms, err := sqlstore.Migrations(migrations, "migrations")
	if err != nil {
		return err
	}
	// Migration files hold several statements: run them on a connection
	// that allows that, which the store's own connections do not.
	mcfg := cfg.Clone()
	mcfg.MultiStatements = true
	connector, err := gomysql.NewConnector(mcfg)
	if err != nil {
		return err
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close() // also releases the lock if RELEASE_LOCK did not run

	// GET_LOCK names are server-wide: name the lock after the database.
	name := "seckill.migrate." + cfg.DBName
	if len(name) > 64 {
		sum := sha256.Sum256([]byte(cfg.DBName))
		name = "seckill.migrate." + hex.EncodeToString(sum[:16])
	}
	const qLock = `SELECT GET_LOCK(?, 60)`
	var locked sql.NullInt64
	if err := conn.QueryRowContext(ctx, qLock, name).Scan(&locked); err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	if locked.Int64 != 1 {
		return fmt.Errorf("lock %q: not obtained within 60 s", name)
	}
	defer func() {
		const qUnlock = `SELECT RELEASE_LOCK(?)`
		var released sql.NullInt64
		_ = conn.QueryRowContext(context.WithoutCancel(ctx), qUnlock, name).Scan(&released)
	}()

	const qTable = `
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    VARCHAR(255) NOT NULL PRIMARY KEY,
    applied_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`
	if _, err := conn.ExecContext(ctx, qTable); err != nil {
		return err
	}
	const qApplied = `SELECT version FROM schema_migrations`
	rows, err := conn.QueryContext(ctx, qApplied)
	if err != nil {
		return err
	}
	var applied []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return err
		}
		applied = append(applied, v)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, m := range ms {
		if slices.Contains(applied, m.Version) {
			continue
		}
		if _, err := conn.ExecContext(ctx, m.SQL); err != nil {
			return fmt.Errorf("%s: %w", m.Version, err)
		}
		const qRecord = `INSERT INTO schema_migrations (version) VALUES (?)`
		if _, err := conn.ExecContext(ctx, qRecord, m.Version); err != nil {
			return err
		}
	}
	return nil
}

// DB returns the database handle, for tools and tests that read the tables.
func (s *Store) DB() *sql.DB { return s.db }

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.db.PingContext(ctx); err != nil {
		return fmt.Errorf("mysql: ping: %w", err)
	}
	return nil
}

// Close closes the database handle.
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
		res, err := tx.ExecContext(ctx, q, a.Name, a.Stock, a.Stock, a.StartsAt, a.EndsAt)
		if err == nil {
			id, err = res.LastInsertId()
		}
		if err != nil {
			return fmt.Errorf("mysql: create activity: %w", err)
		}
		return sqlstore.CheckActivityID(id)
	})
	if err != nil {
		return err
	}
	a.ID, a.Remaining = id, a.Stock
	return nil
}

const activityColumns = `id, name, stock, remaining, starts_at, ends_at`

type scanner interface{ Scan(dest ...any) error }

func scanActivity(row scanner) (seckill.Activity, error) {
	var a seckill.Activity
	err := row.Scan(&a.ID, &a.Name, &a.Stock, &a.Remaining, &a.StartsAt, &a.EndsAt)
	return a, err
}

// Activity returns the activity; ENOTFOUND if there is none.
func (s *Store) Activity(ctx context.Context, id int64) (seckill.Activity, error) {
	const q = `SELECT ` + activityColumns + ` FROM activities WHERE id = ?`
	a, err := scanActivity(s.db.QueryRowContext(ctx, q, id))
	if errors.Is(err, sql.ErrNoRows) {
		return seckill.Activity{}, seckill.Errorf(seckill.ENOTFOUND, "activity %d not found", id)
	} else if err != nil {
		return seckill.Activity{}, fmt.Errorf("mysql: activity %d: %w", id, err)
	}
	return a, nil
}

// Activities lists the activities with ends_at >= since, by id.
func (s *Store) Activities(ctx context.Context, since time.Time) ([]seckill.Activity, error) {
	const q = `SELECT ` + activityColumns + ` FROM activities WHERE ends_at >= ? ORDER BY id`
	rows, err := s.db.QueryContext(ctx, q, sqlstore.CeilMillis(since))
	if err != nil {
		return nil, fmt.Errorf("mysql: activities: %w", err)
	}
	defer rows.Close()
	var as []seckill.Activity
	for rows.Next() {
		a, err := scanActivity(rows)
		if err != nil {
			return nil, fmt.Errorf("mysql: activities: %w", err)
		}
		as = append(as, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("mysql: activities: %w", err)
	}
	return as, nil
}

// Buyers lists the confirmed orders of the activity, by order id.
func (s *Store) Buyers(ctx context.Context, activityID int64) ([]seckill.Buyer, error) {
	const q = `SELECT user_id, id FROM orders WHERE activity_id = ? ORDER BY id`
	rows, err := s.db.QueryContext(ctx, q, activityID)
	if err != nil {
		return nil, fmt.Errorf("mysql: buyers of activity %d: %w", activityID, err)
	}
	defer rows.Close()
	var bs []seckill.Buyer
	for rows.Next() {
		var b seckill.Buyer
		if err := rows.Scan(&b.UserID, &b.OrderID); err != nil {
			return nil, fmt.Errorf("mysql: buyers of activity %d: %w", activityID, err)
		}
		bs = append(bs, b)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("mysql: buyers of activity %d: %w", activityID, err)
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
		return 0, fmt.Errorf("mysql: last order id of activity %d: %w", activityID, err)
	}
	return id, nil
}

// Order returns the confirmed or failed order; ENOTFOUND if there is neither.
func (s *Store) Order(ctx context.Context, id int64) (seckill.Order, error) {
	const q = `
SELECT 1 AS rnk, activity_id, user_id, status, '' AS reason, created_at FROM orders WHERE id = ?
UNION ALL
SELECT 2, activity_id, user_id, 'failed', reason, created_at FROM order_failures WHERE order_id = ?
ORDER BY rnk
LIMIT 1`
	o := seckill.Order{ID: id}
	var rank int
	err := s.db.QueryRowContext(ctx, q, id, id).Scan(&rank, &o.ActivityID, &o.UserID, &o.Status, &o.Reason, &o.CreatedAt)
	if errors.Is(err, sql.ErrNoRows) {
		return seckill.Order{}, seckill.Errorf(seckill.ENOTFOUND, "order %d not found", id)
	} else if err != nil {
		return seckill.Order{}, fmt.Errorf("mysql: order %d: %w", id, err)
	}
	return o, nil
}

// ApplyOrders writes the batch in one transaction, rerun on deadlock or lock
// wait timeout. A request for an activity that does not exist fails with
// ReasonSoldOut, so that one bad message cannot block its batch.
func (s *Store) ApplyOrders(ctx context.Context, reqs []seckill.OrderRequest) ([]seckill.Outcome, error) {
	out, err := s.batch(ctx, reqs, true, sqlstore.Apply)
	if err != nil {
		return nil, fmt.Errorf("mysql: apply orders: %w", err)
	}
	return out, nil
}

// FailOrders records the requests without an outcome as failed with reason,
// under the same activity locks as ApplyOrders, so an order being confirmed
// concurrently is never also recorded as failed.
func (s *Store) FailOrders(ctx context.Context, reqs []seckill.OrderRequest, reason string) ([]seckill.Outcome, error) {
	if err := sqlstore.ValidReason(reason); err != nil {
		return nil, err
	}
	out, err := s.batch(ctx, reqs, false, sqlstore.FailWith(reason))
	if err != nil {
		return nil, fmt.Errorf("mysql: fail orders: %w", err)
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

// inTx runs fn in a READ COMMITTED transaction: every statement reads what
// is committed when it starts, not a snapshot from before the activity
// locks were granted, and InnoDB takes no gap locks.
func (s *Store) inTx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// read locks the activities of reqs and reads what the database holds about
// reqs. Holders are read only if holders is set.
func read(ctx context.Context, tx *sql.Tx, reqs []seckill.OrderRequest, holders bool) (*sqlstore.Facts, error) {
	f := sqlstore.NewFacts()
	activities := sqlstore.ActivityIDs(reqs)

	const qLock = `SELECT id, remaining FROM activities WHERE id IN (%s) ORDER BY id FOR UPDATE`
	err := sqlstore.Query(ctx, tx, fmt.Sprintf(qLock, sqlstore.Params(len(activities))), sqlstore.Args(activities), func(rows *sql.Rows) error {
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
SELECT order_id, 'failed', reason, COALESCE(existing_order_id, 0) FROM order_failures WHERE order_id IN (%[1]s)`
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
// anything else means another transaction got in between, and the whole
// transaction is rerun.
func write(ctx context.Context, tx *sql.Tx, p sqlstore.Plan) error {
	// The condition never lets remaining go below zero, whatever the plan
	// says; the CHECK constraint would refuse it too.
	const qTake = `UPDATE activities SET remaining = remaining - ? WHERE id = ? AND remaining >= ?`
	for _, t := range p.Take {
		if err := exec(ctx, tx, 1, qTake, t.N, t.ActivityID, t.N); err != nil {
			return err
		}
	}

	if n := len(p.Confirm); n > 0 {
		const qConfirm = `
INSERT INTO orders (id, activity_id, user_id, status, created_at)
VALUES %s
ON DUPLICATE KEY UPDATE id = id`
		vals := make([]any, 0, 4*n)
		for _, r := range p.Confirm {
			vals = append(vals, r.OrderID, r.ActivityID, r.UserID, r.CreatedAt)
		}
		if err := exec(ctx, tx, n, fmt.Sprintf(qConfirm, sqlstore.Rows("(?, ?, ?, 'confirmed', ?)", n)), vals...); err != nil {
			return err
		}
	}

	if n := len(p.Fail); n > 0 {
		const qFail = `
INSERT INTO order_failures (order_id, activity_id, user_id, reason, existing_order_id, created_at)
VALUES %s
ON DUPLICATE KEY UPDATE order_id = order_id`
		vals := make([]any, 0, 6*n)
		for _, f := range p.Fail {
			existing := sql.NullInt64{Int64: f.ExistingOrderID, Valid: f.ExistingOrderID != 0}
			vals = append(vals, f.Req.OrderID, f.Req.ActivityID, f.Req.UserID, f.Reason, existing, f.Req.CreatedAt)
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
// succeed: ER_LOCK_DEADLOCK and ER_LOCK_WAIT_TIMEOUT.
func retryable(err error) bool {
	var myErr *gomysql.MySQLError
	return errors.As(err, &myErr) && (myErr.Number == 1213 || myErr.Number == 1205)
}
