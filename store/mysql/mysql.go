// Package mysql implements seckill.Store on MySQL 8 and MariaDB 10.6+ with
// go-sql-driver/mysql.
//
// ApplyOrders writes a batch of new orders (the worker's steady state)
// alongside other batches of the same activity: it reads the stock and the
// recorded failures, inserts the orders, and only then updates the stock,
// which locks the activity row until commit; whatever changed meanwhile
// fails that update, or the count of failures that follows it, or meets the
// inserts in a unique index, and the batch is decided again under the lock
// (see sqlstore.Batch). Other batches, and FailOrders, lock the rows of the
// batch's activities first (SELECT ... FOR UPDATE, in id order), so that
// they run one after the other with every transaction that changes the
// stock, and every read that follows, at READ COMMITTED, sees what the
// previous one committed.
//
// The batches run on connections of their own, whose sessions skip the
// foreign key checks (foreign_key_checks = 0): InnoDB's check of an
// inserted order takes a shared lock on its activity row, which the update
// of the stock that follows would have to upgrade, so two batches of one
// activity would deadlock, and batches could only run one after the other,
// commit included. Every order that a batch inserts names an activity whose
// row the same transaction updates (the stock it takes), and so holds
// locked until commit: the check could not fail. The foreign key stays,
// for every other statement.
//
// Statements use client-side parameter interpolation (one round trip each,
// unless the URL sets interpolateParams) and multi-row IN lists and
// VALUES; the large inserts of orders are prepared once (see
// sqlstore.SQLBatches), so a batch takes about eight round trips whatever
// its size.
package mysql

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
	"strconv"
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

// Store is a seckill.Store on a MySQL or MariaDB database. The methods that
// all engines share come from the embedded sqlstore.Store.
type Store struct {
	*sqlstore.Store
	db *sql.DB
	// batchDB runs ApplyOrders and FailOrders, without foreign key checks
	// (see the package doc).
	batchDB *sql.DB
	batches *sqlstore.SQLBatches
}

var _ seckill.Store = (*Store)(nil)

// maxConns bounds the connections of one Store's reads and lifecycle, and
// batchConns those of its batches, written a few at a time by a worker.
const (
	maxConns   = 16
	batchConns = 8
)

// Open connects to the database at url, pings it, and applies the migrations
// it lacks. See Config for the form of url. Its sessions end when idle in a
// transaction for 15s: MariaDB's idle_transaction_timeout, or on MySQL,
// which has no such limit, wait_timeout (a parameter of that name in url
// sets another limit).
func Open(ctx context.Context, url string) (*Store, error) { return open(ctx, url, "") }

// open connects to the database at url and applies the migrations it lacks
// up to version upTo ("": all of them).
func open(ctx context.Context, url, upTo string) (*Store, error) { return openAs(ctx, url, upTo, "") }

// Servers, as openAs tells them apart.
const (
	serverMySQL   = "mysql"
	serverMariaDB = "mariadb"
)

// openAs is open on a server of the kind given (serverMySQL or
// serverMariaDB), or, if "", of the kind the server says it is.
func openAs(ctx context.Context, url, upTo, server string) (*Store, error) {
	cfg, err := Config(url)
	if err != nil {
		return nil, err
	}
	// Bounded, so that a burst of requests queues here instead of
	// exceeding the server's max_connections (151 by default, shared by
	// every instance), which would fail them.
	db, err := openDB(cfg, maxConns)
	if err != nil {
		return nil, err
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("mysql: cannot reach database %s at %s: %w", cfg.DBName, cfg.Addr, err)
	}
	if server == "" {
		if server, err = serverOf(ctx, db); err != nil {
			db.Close()
			return nil, err
		}
	}
	if limitIdleTx(cfg, server) {
		// The connection the ping made lacks the variable.
		db.Close()
		if db, err = openDB(cfg, maxConns); err != nil {
			return nil, err
		}
	}
	if err := migrate(ctx, cfg, upTo); err != nil {
		db.Close()
		return nil, fmt.Errorf("mysql: migrate: %w", err)
	}
	bcfg := cfg.Clone()
	bcfg.Params = maps.Clone(cfg.Params) // its own, whatever Clone shares
	if bcfg.Params == nil {
		bcfg.Params = make(map[string]string)
	}
	bcfg.Params["foreign_key_checks"] = "0" // set in each session as it connects
	batchDB, err := openDB(bcfg, batchConns)
	if err != nil {
		db.Close()
		return nil, err
	}
	s := &Store{db: db, batchDB: batchDB}
	s.batches = sqlstore.NewSQLBatches(sqlstore.SQLBatchConfig{
		Dialect:   sqlstore.MySQL,
		DB:        batchDB,
		Chunk:     chunk,
		Retryable: retryable,
		InTx:      func(ctx context.Context, fn func(*sql.Tx) error) error { return inTx(ctx, batchDB, fn) },
		LockLate:  true,
		Conflict:  isDupEntry,
	})
	s.Store = sqlstore.New(sqlstore.Engine{
		Name:    "mysql",
		Dialect: sqlstore.MySQL,
		DB:      sqlstore.SQLConn(db),
		InTx: func(ctx context.Context, fn func(sqlstore.Conn) error) error {
			return inTx(ctx, db, func(tx *sql.Tx) error { return fn(sqlstore.SQLConn(tx)) })
		},
		Snapshot: func(ctx context.Context, fn func(sqlstore.Conn) error) error {
			tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
			if err != nil {
				return err
			}
			defer tx.Rollback()
			if err := fn(sqlstore.SQLConn(tx)); err != nil {
				return err
			}
			return tx.Commit()
		},
		Retryable: retryable,
	})
	return s, nil
}

// openDB returns a handle on the database of cfg with at most conns
// connections.
func openDB(cfg *gomysql.Config, conns int) (*sql.DB, error) {
	connector, err := gomysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("mysql: %w", err)
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	idle := 5 * time.Minute
	// A connection idle for wait_timeout is closed by the server: the
	// pool lets go of it first. (database/sql checks its idle connections
	// every max idle time, so one can stay idle for up to twice that.)
	if n, err := strconv.Atoi(cfg.Params["wait_timeout"]); err == nil && n > 0 {
		idle = min(idle, time.Duration(n)*time.Second/3)
	}
	db.SetConnMaxIdleTime(idle)
	return db, nil
}

// serverOf tells MariaDB from MySQL.
func serverOf(ctx context.Context, db *sql.DB) (string, error) {
	var v string
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&v); err != nil {
		return "", fmt.Errorf("mysql: server version: %w", err)
	}
	if strings.Contains(strings.ToLower(v), "mariadb") {
		return serverMariaDB, nil
	}
	return serverMySQL, nil
}

// limitIdleTx makes the server end a session that sits idle inside a
// transaction for sqlstore.IdleTxTimeout, and so release its locks, unless
// cfg sets the variable that does it; it reports whether it set it.
// MariaDB has idle_transaction_timeout. MySQL has no such limit: there it
// sets wait_timeout, which ends a session idle for that long whether in a
// transaction or not (the pool lets go of idle connections before, see
// openDB).
func limitIdleTx(cfg *gomysql.Config, server string) bool {
	v := "wait_timeout"
	if server == serverMariaDB {
		v = "idle_transaction_timeout"
	}
	if _, ok := cfg.Params[v]; ok {
		return false
	}
	cfg.Params[v] = strconv.Itoa(int(sqlstore.IdleTxTimeout / time.Second))
	return true
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

// migrate applies the missing migrations up to version upTo ("": all)
// while holding a named lock, so processes starting together apply each
// exactly once. MySQL commits DDL at once, so a migration is recorded after
// it ran; its statements must be safe to run again should it fail halfway.
func migrate(ctx context.Context, cfg *gomysql.Config, upTo string) error {
	ms, err := sqlstore.Migrations(migrations, "migrations", upTo)
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

// Close closes the database handles.
func (s *Store) Close() error {
	return errors.Join(s.batches.Close(), s.batchDB.Close(), s.db.Close())
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
	const q = `INSERT INTO activities (name, stock, remaining, starts_at, ends_at, pay_within_ms, rebuy, buckets, queue_rate, queue_hold) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	var id int64
	err := inTx(ctx, s.db, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, q, a.Name, a.Stock, a.Stock, a.StartsAt, a.EndsAt, a.PayWithin.Milliseconds(), a.Rebuy, a.Buckets, a.QueueRate, a.QueueHold)
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

// ApplyOrders writes the batch in one transaction, rerun on deadlock or lock
// wait timeout. A request for an activity that does not exist fails with
// ReasonSoldOut, so that one bad message cannot block its batch.
func (s *Store) ApplyOrders(ctx context.Context, reqs []seckill.OrderRequest) ([]seckill.Outcome, error) {
	out, err := s.batch(ctx, reqs, sqlstore.ApplyOp)
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
	out, err := s.batch(ctx, reqs, sqlstore.FailOp(reason))
	if err != nil {
		return nil, fmt.Errorf("mysql: fail orders: %w", err)
	}
	return out, nil
}

// chunk is the most requests ApplyOrders reads and writes with one set of
// statements: a worker's batch of a backlog (4,000) is inserted whole
// before its transaction locks the activity (the chunks after the first
// would wait for the lock). Six placeholders a row stay below the server's
// 65535 of a prepared statement, and the statement below 1 MB.
const chunk = 4000

// batch runs one ApplyOrders or FailOrders transaction (sqlstore.Batch).
func (s *Store) batch(ctx context.Context, reqs []seckill.OrderRequest, op sqlstore.Op) ([]seckill.Outcome, error) {
	return s.batches.Run(ctx, reqs, op)
}

// inTx runs fn in a READ COMMITTED transaction on db: every statement
// reads what is committed when it starts, not a snapshot from before the
// activity locks were granted, and InnoDB takes no gap locks.
func inTx(ctx context.Context, db *sql.DB, fn func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// isDupEntry reports ER_DUP_ENTRY: an inserted row met an existing one in a
// unique index.
func isDupEntry(err error) bool {
	var myErr *gomysql.MySQLError
	return errors.As(err, &myErr) && myErr.Number == 1062
}

// retryable reports the errors after which rerunning the transaction can
// succeed: ER_LOCK_DEADLOCK and ER_LOCK_WAIT_TIMEOUT.
func retryable(err error) bool {
	var myErr *gomysql.MySQLError
	return errors.As(err, &myErr) && (myErr.Number == 1213 || myErr.Number == 1205)
}
