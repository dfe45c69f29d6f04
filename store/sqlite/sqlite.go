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
	"sync"
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

// Store is a seckill.Store on an SQLite database. The methods that all
// engines share come from the embedded sqlstore.Store.
type Store struct {
	*sqlstore.Store
	db *sql.DB
	// writing is held by this process's transaction in progress: the
	// others wait their turn here, handed the lock the moment it is free,
	// rather than in SQLite's busy handler, which sleeps in steps of up to
	// 100 ms (measured: a worker writing 4 batches at once drained 200,000
	// orders at 34,000-46,000/s without this lock, 52,000-55,000/s with
	// it). Other processes still wait in SQLite.
	writing sync.Mutex
	batches *sqlstore.SQLBatches
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
func Open(ctx context.Context, url string) (*Store, error) { return open(ctx, url, "") }

// open opens the database at url and applies the migrations it lacks up to
// version upTo ("": all of them).
func open(ctx context.Context, url, upTo string) (*Store, error) {
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
	inTx := func(ctx context.Context, fn func(sqlstore.Conn) error) error {
		return s.inTx(ctx, func(tx *sql.Tx) error { return fn(sqlstore.SQLConn(tx)) })
	}
	// A transaction holds the write lock from its start, so its reads are
	// one snapshot.
	s.Store = sqlstore.New(sqlstore.Engine{Name: "sqlite", Dialect: sqlstore.SQLite, DB: sqlstore.SQLConn(db),
		InTx: inTx, Snapshot: inTx, Retryable: retryable})
	s.batches = sqlstore.NewSQLBatches(sqlstore.SQLBatchConfig{Dialect: sqlstore.SQLite, DB: db, Chunk: chunk,
		Retryable: retryable, InTx: s.inTx})
	if err := s.migrate(ctx, upTo); err != nil {
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

// migrate applies the missing migrations up to version upTo ("": all) in
// one transaction; it begins IMMEDIATE, so processes starting together
// apply each exactly once.
func (s *Store) migrate(ctx context.Context, upTo string) error {
	ms, err := sqlstore.Migrations(migrations, "migrations", upTo)
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
		err := sqlstore.Query(ctx, tx, qApplied, nil, func(rows sqlstore.Row) error {
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
func (s *Store) Close() error { return errors.Join(s.batches.Close(), s.db.Close()) }

// CreateActivity validates and inserts a with Remaining = Stock, and sets its
// ID and Remaining. StartsAt and EndsAt are set to what is stored: UTC,
// truncated to the millisecond.
func (s *Store) CreateActivity(ctx context.Context, a *seckill.Activity) error {
	if err := a.Validate(); err != nil {
		return err
	}
	a.StartsAt, a.EndsAt = sqlstore.Millis(a.StartsAt), sqlstore.Millis(a.EndsAt)
	a.Buckets = a.BucketCount()
	const q = `INSERT INTO activities (name, stock, remaining, starts_at, ends_at, pay_within_ms, rebuy, buckets, queue_rate, queue_hold) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	var id int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, q, a.Name, a.Stock, a.Stock, text(a.StartsAt), text(a.EndsAt), a.PayWithin.Milliseconds(), a.Rebuy, a.Buckets, a.QueueRate, a.QueueHold)
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
func text(t time.Time) string { return sqlstore.TimeText(t) }

// ApplyOrders writes the batch in one transaction, rerun if the database
// stays locked by another process beyond BusyTimeout. A request for an
// activity that does not exist fails with ReasonSoldOut, so that one bad
// message cannot block its batch.
func (s *Store) ApplyOrders(ctx context.Context, reqs []seckill.OrderRequest) ([]seckill.Outcome, error) {
	out, err := s.batch(ctx, reqs, sqlstore.ApplyOp)
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
	out, err := s.batch(ctx, reqs, sqlstore.FailOp(reason))
	if err != nil {
		return nil, fmt.Errorf("sqlite: fail orders: %w", err)
	}
	return out, nil
}

// chunk is the most requests ApplyOrders reads and writes with one set of
// statements: six variables a row, and two a request in the reads, stay
// below SQLite's 32766. A worker's batch of a backlog (4,000) is one chunk.
const chunk = 4000

// batch runs one ApplyOrders or FailOrders transaction (sqlstore.Batch).
func (s *Store) batch(ctx context.Context, reqs []seckill.OrderRequest, op sqlstore.Op) ([]seckill.Outcome, error) {
	return s.batches.Run(ctx, reqs, op)
}

// inTx runs fn in a transaction, which begins IMMEDIATE (see Open), one at
// a time in this process.
func (s *Store) inTx(ctx context.Context, fn func(*sql.Tx) error) error {
	s.writing.Lock()
	defer s.writing.Unlock()
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
