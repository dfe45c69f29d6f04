// Package postgres implements seckill.Store on PostgreSQL with pgx's native
// connection pool.
//
// ApplyOrders writes a batch of new orders (the worker's steady state)
// alongside other batches of the same activity: it reads the stock and the
// recorded failures, inserts the orders, and only then updates the stock,
// which locks the activity row until commit; whatever changed meanwhile
// fails that update, or the count of failures that follows it, or meets the
// inserts in a unique index, and the batch is decided again under the lock
// (see sqlstore.Batch). Other batches, and FailOrders, lock the rows of the
// batch's activities first (SELECT ... FOR NO KEY UPDATE, in id order), so
// that they run one after the other with every transaction that changes
// the stock, and every read that follows, at READ COMMITTED, sees what the
// previous one committed. A batch takes four round trips whatever its
// size: BEGIN, one pipelined set of reads, one pipelined set of writes,
// COMMIT.
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/store/internal/sqlstore"
)

//go:embed migrations/*.sql
var migrations embed.FS

// DefaultConnectTimeout bounds connecting when the URL has no connect_timeout.
const DefaultConnectTimeout = 10 * time.Second

// Store is a seckill.Store on a PostgreSQL database. The methods that all
// engines share come from the embedded sqlstore.Store.
type Store struct {
	*sqlstore.Store
	pool *pgxpool.Pool
}

var _ seckill.Store = (*Store)(nil)

// Open connects to the database at url (postgres:// or postgresql://, with
// any parameter pgx accepts), pings it, and applies the migrations it lacks.
// Its sessions end when idle in a transaction for 15s
// (idle_in_transaction_session_timeout; a parameter of that name in url
// sets another limit, 0 none).
func Open(ctx context.Context, url string) (*Store, error) { return open(ctx, url, "") }

// open connects to the database at url and applies the migrations it lacks
// up to version upTo ("": all of them).
func open(ctx context.Context, url, upTo string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres: bad url: %w", err)
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = DefaultConnectTimeout
	}
	// pgx prepares statements once per connection, and after five runs
	// PostgreSQL may keep a generic plan made while orders was nearly
	// empty: a sequential scan that it keeps as the table grows to millions
	// of rows during a sale (measured: 9 ms per batch at 17,000 orders,
	// growing linearly). Planning each run costs far less than that.
	if _, ok := cfg.ConnConfig.RuntimeParams["plan_cache_mode"]; !ok {
		cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_custom_plan"
	}
	// A session frozen or cut off inside a transaction ends after
	// sqlstore.IdleTxTimeout, and its locks with it.
	if _, ok := cfg.ConnConfig.RuntimeParams[idleTxParam]; !ok {
		cfg.ConnConfig.RuntimeParams[idleTxParam] = fmt.Sprintf("%dms", sqlstore.IdleTxTimeout.Milliseconds())
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: cannot reach database: %w", err)
	}
	if err := migrate(ctx, pool, upTo); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: migrate: %w", err)
	}
	return &Store{pool: pool, Store: sqlstore.New(sqlstore.Engine{
		Name:    "postgres",
		Dialect: sqlstore.Postgres,
		DB:      conn{pool},
		InTx: func(ctx context.Context, fn func(sqlstore.Conn) error) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return fn(conn{tx}) })
		},
		Snapshot: func(ctx context.Context, fn func(sqlstore.Conn) error) error {
			opts := pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}
			return pgx.BeginTxFunc(ctx, pool, opts, func(tx pgx.Tx) error { return fn(conn{tx}) })
		},
		Retryable: retryable,
	})}, nil
}

// idleTxParam is PostgreSQL's limit on a session idle in a transaction.
const idleTxParam = "idle_in_transaction_session_timeout"

// conn adapts the pool or a transaction to sqlstore.Conn.
type conn struct {
	q interface {
		Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
		Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
		QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	}
}

func (c conn) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	ct, err := c.q.Exec(ctx, q, args...)
	return ct.RowsAffected(), err
}

func (c conn) Query(ctx context.Context, q string, args []any, scan func(sqlstore.Row) error) error {
	rows, err := c.q.Query(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	return sqlstore.EachRow(rows, scan)
}

func (c conn) QueryRow(ctx context.Context, q string, args ...any) sqlstore.Row {
	return c.q.QueryRow(ctx, q, args...)
}

// migrationLock keys the advisory lock that serialises the migrations of one
// database (advisory locks are per database): "seckill" in ASCII.
const migrationLock int64 = 0x73_65_63_6b_69_6c_6c

// migrate applies the missing migrations up to version upTo ("": all) in
// one transaction that holds the advisory lock, so processes starting
// together apply each exactly once.
func migrate(ctx context.Context, pool *pgxpool.Pool, upTo string) error {
	ms, err := sqlstore.Migrations(migrations, "migrations", upTo)
	if err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		const qLock = `SELECT pg_advisory_xact_lock($1)`
		if _, err := tx.Exec(ctx, qLock, migrationLock); err != nil {
			return fmt.Errorf("lock: %w", err)
		}
		const qTable = `
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    VARCHAR(255) PRIMARY KEY,
    applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
)`
		if _, err := tx.Exec(ctx, qTable); err != nil {
			return err
		}
		const qApplied = `SELECT version FROM schema_migrations`
		rows, _ := tx.Query(ctx, qApplied)
		applied, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		for _, m := range ms {
			if slices.Contains(applied, m.Version) {
				continue
			}
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return fmt.Errorf("%s: %w", m.Version, err)
			}
			const qRecord = `INSERT INTO schema_migrations (version) VALUES ($1)`
			if _, err := tx.Exec(ctx, qRecord, m.Version); err != nil {
				return err
			}
		}
		return nil
	})
}

// Pool returns the connection pool, for tools and tests that read the tables.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("postgres: ping: %w", err)
	}
	return nil
}

// Close closes the pool, waiting for connections in use to be returned.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// CreateActivity validates and inserts a with Remaining = Stock, and sets its
// ID and Remaining. StartsAt and EndsAt are set to what is stored: UTC,
// truncated to the millisecond.
func (s *Store) CreateActivity(ctx context.Context, a *seckill.Activity) error {
	if err := a.Validate(); err != nil {
		return err
	}
	a.StartsAt, a.EndsAt = sqlstore.Millis(a.StartsAt), sqlstore.Millis(a.EndsAt)
	a.Buckets = a.BucketCount()
	const q = `
INSERT INTO activities (name, stock, remaining, starts_at, ends_at, pay_within_ms, rebuy, buckets, queue_rate, queue_hold)
VALUES ($1, $2, $2, $3, $4, $5, $6, $7, $8, $9)
RETURNING id`
	var id int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, q, a.Name, a.Stock, a.StartsAt, a.EndsAt, a.PayWithin.Milliseconds(), a.Rebuy, a.Buckets, a.QueueRate, a.QueueHold).Scan(&id); err != nil {
			return fmt.Errorf("postgres: create activity: %w", err)
		}
		return sqlstore.CheckActivityID(id)
	})
	if err != nil {
		return err
	}
	a.ID, a.Remaining = id, a.Stock
	return nil
}

// ApplyOrders writes the batch in one transaction, rerun on deadlock or
// serialisation failure. A request for an activity that does not exist fails
// with ReasonSoldOut, so that one bad message cannot block its batch.
func (s *Store) ApplyOrders(ctx context.Context, reqs []seckill.OrderRequest) ([]seckill.Outcome, error) {
	out, err := s.batch(ctx, reqs, sqlstore.ApplyOp)
	if err != nil {
		return nil, fmt.Errorf("postgres: apply orders: %w", err)
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
	out, err := s.batch(ctx, reqs, sqlstore.FailOp(reason))
	if err != nil {
		return nil, fmt.Errorf("postgres: fail orders: %w", err)
	}
	return out, nil
}

// chunk is the most requests ApplyOrders reads and writes with one set of
// statements: the lists go as arrays, one argument whatever their length, so
// the worker's largest batches (10,000) take one round trip for the reads
// and one for the writes, and insert all their orders before the write
// locks the activity (the chunks after the first would wait for it).
const chunk = 10_000

// batch runs one ApplyOrders or FailOrders transaction (sqlstore.Batch).
func (s *Store) batch(ctx context.Context, reqs []seckill.OrderRequest, op sqlstore.Op) ([]seckill.Outcome, error) {
	return sqlstore.Batch(ctx, sqlstore.Batcher[pgx.Tx]{
		Chunk:     chunk,
		Retryable: retryable,
		InTx:      func(fn func(pgx.Tx) error) error { return pgx.BeginFunc(ctx, s.pool, fn) },
		Read: func(tx pgx.Tx, chunk []seckill.OrderRequest, need sqlstore.Need) (*sqlstore.Facts, error) {
			return read(ctx, tx, chunk, need)
		},
		Write:    func(tx pgx.Tx, p sqlstore.Plan) error { return write(ctx, tx, p) },
		LockLate: true,
	}, reqs, op)
}

// read locks the activities of reqs (unless need.Unlocked) and reads what
// the database holds about reqs, as much as need says, in one pipelined
// round trip. The lock is FOR NO KEY UPDATE, the one the update of the
// stock takes: it does not hold up the check that the inserts of another
// batch of the activity make of the activity they name, which locks it FOR
// KEY SHARE (migration 0004; see sqlstore.Batcher's LockLate).
func read(ctx context.Context, tx pgx.Tx, reqs []seckill.OrderRequest, need sqlstore.Need) (*sqlstore.Facts, error) {
	f := sqlstore.NewFacts(len(reqs))
	activities := sqlstore.ActivityIDs(reqs)
	b := &pgx.Batch{}

	// The statements of a batch run on generic plans (see write), but for
	// the read of the holders below: the connection forces custom plans
	// (see open), which for a list of thousands of ids means planning it
	// anew at every run, estimating each id on its own. A lookup of a
	// list of ids in a primary key has one plan whatever the list holds.
	b.Queue(genericPlans)

	qLock := `SELECT id, remaining, pay_within_ms FROM activities WHERE id = ANY($1) ORDER BY id`
	if !need.Unlocked {
		qLock += ` FOR NO KEY UPDATE`
	}
	b.Queue(qLock, activities).Query(func(rows pgx.Rows) error {
		var id, remaining, payMS int64
		_, err := pgx.ForEachRow(rows, []any{&id, &remaining, &payMS}, func() error {
			f.Remaining[id] = remaining
			f.PayWithin[id] = time.Duration(payMS) * time.Millisecond
			return nil
		})
		return err
	})

	// An order in orders was confirmed: that is its outcome, whatever
	// happened to it since (paid, cancelled, expired).
	qOutcomes := `
SELECT order_id, 'failed', reason, coalesce(existing_order_id, 0) FROM order_failures WHERE order_id = ANY($1)`
	if need.Orders {
		qOutcomes += `
UNION ALL
SELECT id, 'confirmed', '', 0 FROM orders WHERE id = ANY($1)`
	}
	b.Queue(qOutcomes, sqlstore.OrderIDs(reqs)).Query(func(rows pgx.Rows) error {
		var id int64
		var o seckill.Outcome
		_, err := pgx.ForEachRow(rows, []any{&id, &o.Status, &o.Reason, &o.ExistingOrderID}, func() error {
			f.Outcomes[id] = o
			return nil
		})
		return err
	})

	if need.Holders {
		b.Queue(`RESET plan_cache_mode`) // the connection's mode
		// One index probe per user, whatever the statistics say: with a
		// plain "user_id = ANY($2)" the planner scans all orders of the
		// activity when it believes them few, and in a flash sale one
		// activity holds nearly all orders (measured: 11 ms per batch at
		// 18,000 orders, growing). LIMIT 1 keeps the subquery from being
		// flattened into a join that could become such a scan again.
		const qHolders = `
SELECT u.user_id, o.id
FROM unnest($2::bigint[]) AS u (user_id)
CROSS JOIN LATERAL (SELECT id FROM orders WHERE activity_id = $1 AND holder_user_id = u.user_id LIMIT 1) AS o`
		for _, a := range activities {
			b.Queue(qHolders, a, sqlstore.Users(reqs, a)).Query(func(rows pgx.Rows) error {
				var user, id int64
				_, err := pgx.ForEachRow(rows, []any{&user, &id}, func() error {
					f.Holders[sqlstore.Key{ActivityID: a, UserID: user}] = id
					return nil
				})
				return err
			})
		}
		b.Queue(genericPlans)
	}

	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, err
	}
	return f, nil
}

// genericPlans makes the rest of the transaction run its statements on
// generic plans (see read and write).
const genericPlans = `SET LOCAL plan_cache_mode = force_generic_plan`

// orderColumns are the columns of orders that write copies.
var orderColumns = []string{"id", "activity_id", "user_id", "holder_user_id", "status", "created_at", "pay_by"}

// confirmRows is the rows of a plan's confirmed orders, for COPY.
type confirmRows struct {
	rows []sqlstore.Confirm
	i    int
	vals [7]any
}

func (r *confirmRows) Next() bool { r.i++; return r.i <= len(r.rows) }
func (r *confirmRows) Err() error { return nil }

// Values returns the values of the current row, in a slice that the next
// call reuses (COPY encodes each row before it asks for the next).
func (r *confirmRows) Values() ([]any, error) {
	c := &r.rows[r.i-1]
	var payBy any // nil: NULL
	if !c.PayBy.IsZero() {
		payBy = c.PayBy
	}
	r.vals = [7]any{c.OrderID, c.ActivityID, c.UserID, c.UserID, "confirmed", c.CreatedAt, payBy}
	return r.vals[:], nil
}

// write carries out p in one pipelined round trip. Every statement must
// affect exactly the rows planned, and an insert that meets an existing row
// fails; either means another transaction got in between, and the whole
// transaction is rerun.
func write(ctx context.Context, tx pgx.Tx, p sqlstore.Plan) error {
	b := &pgx.Batch{}
	expect := func(n int) func(pgconn.CommandTag) error {
		return func(ct pgconn.CommandTag) error {
			if ct.RowsAffected() != int64(n) {
				return fmt.Errorf("%w: %s affected %d rows, want %d", sqlstore.ErrConflict, ct, ct.RowsAffected(), n)
			}
			return nil
		}
	}

	// The confirmed orders are copied (COPY, in binary): no statement to
	// plan, no arrays to unpack, and the rows go into the table's pages
	// several at a time, with one WAL record per page rather than one per
	// row. An order that meets an existing row in a unique index fails
	// the copy, as it would the insert (see isUniqueViolation).
	if n := len(p.Confirm); n > 0 {
		copied, err := tx.CopyFrom(ctx, pgx.Identifier{"orders"}, orderColumns, &confirmRows{rows: p.Confirm})
		if isUniqueViolation(err) {
			return fmt.Errorf("%w: %w", sqlstore.ErrConflict, err)
		} else if err != nil {
			return err
		}
		if copied != int64(n) {
			return fmt.Errorf("%w: copied %d orders, want %d", sqlstore.ErrConflict, copied, n)
		}
	}

	// The statements below run on generic plans, as read set (and so does
	// the check that migration 0004 makes of each statement's orders). The
	// connection forces custom plans (see open), which for an insert of
	// thousands of rows means copying the arrays into the plan at every
	// run, and planned the foreign key check of each inserted row (an SPI
	// query) once per row, before that migration: three quarters of the
	// database's time (measured: 22 µs of backend CPU per order, 5.6 µs
	// with generic plans). An insert from arrays has one plan whatever
	// they hold.
	if n := len(p.Fail); n > 0 {
		ids, activities, users, existing := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
		reasons, created := make([]string, n), make([]time.Time, n)
		for i, f := range p.Fail {
			ids[i], activities[i], users[i], created[i] = f.Req.OrderID, f.Req.ActivityID, f.Req.UserID, f.Req.CreatedAt
			reasons[i], existing[i] = f.Reason, f.ExistingOrderID
		}
		const qFail = `
INSERT INTO order_failures (order_id, activity_id, user_id, reason, existing_order_id, created_at)
SELECT order_id, activity_id, user_id, reason, nullif(existing_order_id, 0), created_at
FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::text[], $5::bigint[], $6::timestamptz[])
    AS r (order_id, activity_id, user_id, reason, existing_order_id, created_at)`
		b.Queue(qFail, ids, activities, users, reasons, existing, created).Exec(expect(n))
	}

	// The stock last: its update locks the activity row until commit, and
	// a plan made without the lock (p.Unlocked) inserted its orders while
	// other batches of the activity were writing theirs. The condition
	// never lets remaining go below zero, whatever the plan says (the CHECK
	// constraint would refuse it too); without the lock, stock that another
	// batch took meanwhile fails the plan.
	const qTake = `UPDATE activities SET remaining = remaining - $2 WHERE id = $1 AND remaining >= $2`
	for _, t := range p.Take {
		b.Queue(qTake, t.ActivityID, t.N).Exec(expect(1))
	}
	if p.Unlocked != nil {
		// Under the locks now: a FailOrders that recorded one of these
		// orders as failed since the plan's read (it could not see them
		// in orders, uncommitted) has committed by now.
		const qRecorded = `SELECT count(*) FROM order_failures WHERE order_id = ANY($1)`
		b.Queue(qRecorded, p.Unlocked).QueryRow(func(row pgx.Row) error {
			var n int
			if err := row.Scan(&n); err != nil {
				return err
			}
			if n != p.Recorded {
				return fmt.Errorf("%w: %d of the orders failed meanwhile", sqlstore.ErrConflict, n-p.Recorded)
			}
			return nil
		})
	}

	if b.Len() == 0 {
		return nil
	}
	err := tx.SendBatch(ctx, b).Close()
	if isUniqueViolation(err) {
		return fmt.Errorf("%w: %w", sqlstore.ErrConflict, err)
	}
	return err
}

// isUniqueViolation reports a unique_violation: a row that the facts read
// under the activity locks did not show was inserted by a transaction that
// holds none of them (an order id of another activity, a failure for an
// activity that does not exist). The inserts take no ON CONFLICT clause,
// whose speculative insertion costs a third more per row; the rerun reads
// the row and decides again.
func isUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505"
}

// retryable reports the errors after which rerunning the transaction can
// succeed: serialization_failure and deadlock_detected.
func retryable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40001" || pgErr.Code == "40P01")
}
