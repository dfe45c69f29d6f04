package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seckilldev/seckill"
)

// SQLBatches runs the ApplyOrders and FailOrders transactions (Batch) of an
// engine on database/sql: the reads are ReadFacts, the writes are write.
// Every difference between the engines is in its Dialect.
type SQLBatches struct {
	d         Dialect
	db        *sql.DB
	chunk     int
	retryable func(error) bool
	inTx      func(context.Context, func(*sql.Tx) error) error
	lockLate  bool
	conflict  func(error) bool
	orders    *insert
	failures  *insert

	mu       sync.Mutex
	prepared bool      // the inserts' statements are prepared
	tried    time.Time // when preparing them last failed
}

// SQLBatchConfig is what NewSQLBatches needs of an engine.
type SQLBatchConfig struct {
	Dialect Dialect
	// DB runs the batches' transactions; statements are prepared on it.
	DB *sql.DB
	// Chunk is Batcher.Chunk: it must keep six placeholders a row, and two
	// a request in the reads, within the engine's limit.
	Chunk     int
	Retryable func(error) bool
	// InTx runs fn in a transaction on DB, committed if fn returns nil.
	InTx func(context.Context, func(*sql.Tx) error) error
	// LockLate is Batcher.LockLate. An engine whose foreign key checks
	// lock the activity rows that the inserted orders name (InnoDB: a
	// shared lock, which the update of the stock would have to upgrade)
	// sets it only where DB's sessions skip those checks.
	LockLate bool
	// Conflict reports the errors of an insert that mean a row met an
	// existing one in a unique index, where the dialect's inserts do not
	// skip such rows (nil: they do): the transaction is rerun, as after
	// ErrConflict.
	Conflict func(error) bool
}

// NewSQLBatches returns the batches of an engine on database/sql. Close
// releases the statements they prepare.
func NewSQLBatches(c SQLBatchConfig) *SQLBatches {
	return &SQLBatches{d: c.Dialect, db: c.DB, chunk: c.Chunk, retryable: c.Retryable, inTx: c.InTx, lockLate: c.LockLate,
		conflict: c.Conflict,
		orders: newInsert(c.Chunk, `INSERT INTO orders (id, activity_id, user_id, holder_user_id, status, created_at, pay_by) VALUES `,
			"(?, ?, ?, ?, 'confirmed', ?, ?)", c.Dialect.ignoreDup("id"), 6),
		failures: newInsert(c.Chunk, `INSERT INTO order_failures (order_id, activity_id, user_id, reason, existing_order_id, created_at) VALUES `,
			"(?, ?, ?, ?, ?, ?)", c.Dialect.ignoreDup("order_id"), 6),
	}
}

// Run runs one ApplyOrders or FailOrders transaction (Batch).
func (b *SQLBatches) Run(ctx context.Context, reqs []seckill.OrderRequest, op Op) ([]seckill.Outcome, error) {
	b.prepare(ctx)
	return Batch(ctx, Batcher[*sql.Tx]{
		Chunk:     b.chunk,
		Retryable: b.retryable,
		InTx:      func(fn func(*sql.Tx) error) error { return b.inTx(ctx, fn) },
		Read: func(tx *sql.Tx, chunk []seckill.OrderRequest, need Need) (*Facts, error) {
			return b.d.ReadFacts(ctx, tx, chunk, need)
		},
		Write:    func(tx *sql.Tx, p Plan) error { return b.write(ctx, tx, p) },
		LockLate: b.lockLate,
	}, reqs, op)
}

// retryPrepare is how long the batches go without prepared statements
// after preparing them failed (the schema of an older version, a server
// out of prepared statements) before they try again.
const retryPrepare = 10 * time.Second

// prepare prepares the inserts' statements, unless they are, or preparing
// them failed less than retryPrepare ago; the inserts do without them
// meanwhile. This runs before the transaction begins: a transaction that
// prepared on db would wait for a free connection while holding one,
// forever if db has no other (SQLite :memory:).
func (b *SQLBatches) prepare(ctx context.Context) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.prepared || time.Since(b.tried) < retryPrepare {
		return
	}
	if err := errors.Join(b.orders.prepare(ctx, b.db), b.failures.prepare(ctx, b.db)); err != nil {
		b.tried = time.Now()
		return
	}
	b.prepared = true
}

// Close closes the prepared statements.
func (b *SQLBatches) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return errors.Join(b.orders.close(), b.failures.close())
}

// ReadFacts locks the activities of reqs (unless need.Unlocked) and reads
// what the database holds about reqs, as much as need says: the read of the
// engines on database/sql (PostgreSQL pipelines its own). The activities
// and the users are IN lists of placeholders, which the caller's chunks
// keep within the engine's limit; the order ids are looked up as lookup
// says.
func (d Dialect) ReadFacts(ctx context.Context, tx *sql.Tx, reqs []seckill.OrderRequest, need Need) (*Facts, error) {
	f := NewFacts(len(reqs))
	activities := ActivityIDs(reqs)

	qLock := `SELECT id, remaining, pay_within_ms FROM activities WHERE id IN (` + Params(len(activities)) + `) ORDER BY id`
	if !need.Unlocked {
		qLock += d.forUpdate
	}
	err := Query(ctx, tx, qLock, Args(activities), func(rows Row) error {
		var id, remaining, payMS int64
		if err := rows.Scan(&id, &remaining, &payMS); err != nil {
			return err
		}
		f.Remaining[id] = remaining
		f.PayWithin[id] = time.Duration(payMS) * time.Millisecond
		return nil
	})
	if err != nil {
		return nil, err
	}

	// An order in orders was confirmed: that is its outcome, whatever
	// happened to it since (paid, cancelled, expired).
	ids := lookup(OrderIDs(reqs))
	qOutcomes := `SELECT order_id, 'failed', reason, COALESCE(existing_order_id, 0) FROM order_failures WHERE ` + ids.cond("order_id")
	args := ids.args
	if need.Orders {
		qOutcomes += ` UNION ALL SELECT id, 'confirmed', '', 0 FROM orders WHERE ` + ids.cond("id")
		args = append(args, ids.args...)
	}
	err = Query(ctx, tx, qOutcomes, args, func(rows Row) error {
		var id int64
		var o seckill.Outcome
		if err := rows.Scan(&id, &o.Status, &o.Reason, &o.ExistingOrderID); err != nil {
			return err
		}
		if ids.has(id) {
			f.Outcomes[id] = o
		}
		return nil
	})
	if err != nil || !need.Holders {
		return f, err
	}

	for _, a := range activities {
		users := Args(Users(reqs, a))
		qHolders := `SELECT holder_user_id, id FROM orders WHERE activity_id = ? AND holder_user_id IN (` + Params(len(users)) + `)`
		err := Query(ctx, tx, qHolders, append([]any{a}, users...), func(rows Row) error {
			var user, id int64
			if err := rows.Scan(&user, &id); err != nil {
				return err
			}
			f.Holders[Key{ActivityID: a, UserID: user}] = id
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return f, nil
}

// write carries out p. Every statement must affect exactly the rows
// planned, or the whole transaction is rerun (ErrConflict), and so must an
// insert that meets an existing row in a unique index (which either skips
// it, the dialect's ignoreDup, or fails: SQLBatchConfig.Conflict).
// A plan made without the activity locks (p.Unlocked) inserts first, then
// takes the stock, which locks the activities, then counts the failures
// recorded meanwhile (see Batcher.Write); any other takes the stock first,
// under the locks its read took.
func (b *SQLBatches) write(ctx context.Context, tx *sql.Tx, p Plan) error {
	if p.Unlocked == nil {
		if err := b.take(ctx, tx, p); err != nil {
			return err
		}
	}

	if n := len(p.Confirm); n > 0 {
		vals := make([]any, 0, 6*n)
		for _, r := range p.Confirm {
			vals = append(vals, r.OrderID, r.ActivityID, r.UserID, r.UserID, b.d.time(r.CreatedAt), b.d.nullTime(r.PayBy))
		}
		if err := b.orders.exec(ctx, tx, vals); err != nil {
			return b.conflicted(err)
		}
	}

	if n := len(p.Fail); n > 0 {
		vals := make([]any, 0, 6*n)
		for _, f := range p.Fail {
			existing := sql.NullInt64{Int64: f.ExistingOrderID, Valid: f.ExistingOrderID != 0}
			vals = append(vals, f.Req.OrderID, f.Req.ActivityID, f.Req.UserID, f.Reason, existing, b.d.time(f.Req.CreatedAt))
		}
		if err := b.failures.exec(ctx, tx, vals); err != nil {
			return b.conflicted(err)
		}
	}

	if p.Unlocked == nil {
		return nil
	}
	if err := b.take(ctx, tx, p); err != nil {
		return err
	}
	// Under the locks now: a FailOrders that recorded one of these orders
	// as failed since the plan's read (it could not see them in orders,
	// uncommitted) has committed by now, and this statement reads what is
	// committed (READ COMMITTED; SQLite has one writer at a time).
	ids := lookup(p.Unlocked)
	n := 0
	q := `SELECT order_id FROM order_failures WHERE ` + ids.cond("order_id")
	err := Query(ctx, tx, q, ids.args, func(rows Row) error {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return err
		}
		if ids.has(id) {
			n++
		}
		return nil
	})
	if err != nil {
		return err
	}
	if n != p.Recorded {
		return fmt.Errorf("%w: %d of the orders failed meanwhile", ErrConflict, n-p.Recorded)
	}
	return nil
}

// conflicted is err of an insert, an ErrConflict if it is one (see
// SQLBatchConfig.Conflict).
func (b *SQLBatches) conflicted(err error) error {
	if b.conflict != nil && b.conflict(err) {
		return fmt.Errorf("%w: %w", ErrConflict, err)
	}
	return err
}

// take takes the plan's stock. The condition never lets remaining go below
// zero, whatever the plan says (the CHECK constraint would refuse it too);
// without the lock, stock that another batch took meanwhile fails the plan.
func (b *SQLBatches) take(ctx context.Context, tx *sql.Tx, p Plan) error {
	const qTake = `UPDATE activities SET remaining = remaining - ? WHERE id = ? AND remaining >= ?`
	for _, t := range p.Take {
		if err := execWant(ctx, tx, 1, qTake, t.N, t.ActivityID, t.N); err != nil {
			return err
		}
	}
	return nil
}

// insertSizes are the row counts of the multi-row inserts that are
// prepared besides the chunk's own, largest first.
var insertSizes = []int{1000, 200, 50}

// insert is a multi-row INSERT: head, then rows of width placeholders
// separated by commas, then tail. Its statements of the chunk's size and
// of insertSizes are prepared once, on the database, and then on each
// connection at its first use in a transaction (sql.Tx.StmtContext): the
// server binds their values without parsing them (measured on MariaDB:
// parsing the multi-row inserts was a fifth of its time).
type insert struct {
	head, row, tail string
	width           int
	sizes           []int // of the statements to prepare, largest first
	// stmts holds the prepared statements by size, once all are
	// prepared; it is set once, before the transactions that read it.
	stmts atomic.Pointer[map[int]*sql.Stmt]
}

func newInsert(chunk int, head, row, tail string, width int) *insert {
	ins := &insert{head: head, row: row, tail: tail, width: width, sizes: []int{chunk}}
	for _, size := range insertSizes {
		if size < chunk {
			ins.sizes = append(ins.sizes, size)
		}
	}
	return ins
}

// prepare prepares the insert's statements on db, unless they are.
func (ins *insert) prepare(ctx context.Context, db *sql.DB) error {
	if ins.stmts.Load() != nil {
		return nil
	}
	stmts := make(map[int]*sql.Stmt, len(ins.sizes))
	for _, size := range ins.sizes {
		st, err := db.PrepareContext(ctx, ins.query(size))
		if err != nil {
			for _, st := range stmts {
				st.Close()
			}
			return err
		}
		stmts[size] = st
	}
	ins.stmts.Store(&stmts)
	return nil
}

// query is the statement that inserts n rows.
func (ins *insert) query(n int) string { return ins.head + Rows(ins.row, n) + ins.tail }

// exec inserts the rows of vals, which must all be inserted: runs of rows
// of a prepared size through the prepared statements, if they are, the
// rest with one statement of its own.
func (ins *insert) exec(ctx context.Context, tx *sql.Tx, vals []any) error {
	if stmts := ins.stmts.Load(); stmts != nil {
		for _, size := range ins.sizes {
			for len(vals) >= size*ins.width {
				st := tx.StmtContext(ctx, (*stmts)[size])
				if err := stmtWant(ctx, st, size, vals[:size*ins.width]...); err != nil {
					return err
				}
				vals = vals[size*ins.width:]
			}
		}
	}
	if n := len(vals) / ins.width; n > 0 {
		return execWant(ctx, tx, n, ins.query(n), vals...)
	}
	return nil
}

func (ins *insert) close() error {
	stmts := ins.stmts.Swap(nil)
	if stmts == nil {
		return nil
	}
	var errs []error
	for _, st := range *stmts {
		errs = append(errs, st.Close())
	}
	return errors.Join(errs...)
}

// execWant runs a statement that must affect want rows.
func execWant(ctx context.Context, tx *sql.Tx, want int, q string, args ...any) error {
	res, err := tx.ExecContext(ctx, q, args...)
	return affected(res, err, want)
}

// stmtWant runs a prepared statement that must affect want rows.
func stmtWant(ctx context.Context, st *sql.Stmt, want int, args ...any) error {
	res, err := st.ExecContext(ctx, args...)
	return affected(res, err, want)
}

func affected(res sql.Result, err error, want int) error {
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n != int64(want) {
		return fmt.Errorf("%w: %d rows affected, want %d", ErrConflict, n, want)
	}
	return nil
}

// idLookup is how a statement finds the rows of a list of distinct order
// ids in a primary key: as an IN list of them, or, for ids that lie close
// together (a worker's batch: consecutive orders of one activity), as the
// range from the least to the greatest, two arguments rather than
// thousands that the server would parse at every run; the range's rows of
// other ids are then skipped (has).
type idLookup struct {
	args []any
	set  map[int64]bool // the ids, if looked up as a range
}

func lookup(ids []int64) idLookup {
	if len(ids) == 0 {
		return idLookup{args: []any{}}
	}
	lo, hi := slices.Min(ids), slices.Max(ids)
	// The range holds at most as many other ids as the list holds.
	if uint64(hi-lo) >= 2*uint64(len(ids)) {
		return idLookup{args: Args(ids)}
	}
	set := make(map[int64]bool, len(ids))
	for _, id := range ids {
		set[id] = true
	}
	return idLookup{args: []any{lo, hi}, set: set}
}

// cond is the condition that col is one of the ids (or in their range).
func (l idLookup) cond(col string) string {
	if l.set != nil {
		return col + ` BETWEEN ? AND ?`
	}
	if len(l.args) == 0 {
		return `1 = 0`
	}
	return col + ` IN (` + Params(len(l.args)) + `)`
}

// has reports whether a row of id that cond found is one of the ids.
func (l idLookup) has(id int64) bool { return l.set == nil || l.set[id] }
