package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Conn runs statements written with ? placeholders, inside a transaction or
// not. Each engine adapts its driver to it (SQLConn for database/sql; pgx in
// store/postgres), so that the bodies in this package are written once.
type Conn interface {
	// Exec runs a statement and returns the number of rows it affected.
	Exec(ctx context.Context, q string, args ...any) (int64, error)
	// Query runs q and calls scan for each row.
	Query(ctx context.Context, q string, args []any, scan func(Row) error) error
	// QueryRow runs q, which returns at most one row.
	QueryRow(ctx context.Context, q string, args ...any) Row
}

// Querier is what database/sql's *DB, *Tx and *Conn have in common.
type Querier interface {
	ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row
}

// SQLConn adapts a database/sql handle or transaction to Conn.
func SQLConn(q Querier) Conn { return sqlConn{q} }

type sqlConn struct{ q Querier }

func (c sqlConn) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	res, err := c.q.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (c sqlConn) Query(ctx context.Context, q string, args []any, scan func(Row) error) error {
	rows, err := c.q.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	return EachRow(rows, scan)
}

// ResultSet is what the rows of database/sql and pgx have in common.
type ResultSet interface {
	Row
	Next() bool
	Err() error
}

// EachRow calls scan for each row of rows, which the caller closes.
func EachRow(rows ResultSet, scan func(Row) error) error {
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

func (c sqlConn) QueryRow(ctx context.Context, q string, args ...any) Row {
	return c.q.QueryRowContext(ctx, q, args...)
}

// Dialect is what the shared SQL of this package has to know about an
// engine: every difference between the three lives here.
type Dialect struct {
	// dollar: placeholders are $1, $2, ... (see Dollar).
	dollar bool
	// anyArray: a list of ids is one array argument, "col = ANY(?)",
	// rather than "col IN (?, ?, ...)": one prepared statement whatever the
	// length of the list.
	anyArray bool
	// textTime: times are stored as text in TimeFormat (SQLite), not in a
	// time type.
	textTime bool
	// forUpdate ends a SELECT that locks the rows it reads; empty where a
	// write transaction holds the whole database (SQLite).
	forUpdate string
	// claimFence stores a fencing token for a name unless a higher one is
	// stored: arguments name, token. Its affected-rows count means nothing
	// (MySQL counts an unchanged row as 0, an updated one as 2): the token
	// in force is read afterwards.
	claimFence string
	// ignoreDup ends a multi-row INSERT so that a row meeting an existing
	// one in the unique index of key (or any unique index) is not inserted
	// and not counted as affected, rather than failing the statement; ""
	// where such a row fails it, which the engine's SQLBatchConfig.Conflict
	// tells.
	ignoreDup func(key string) string
}

// onConflictDoNothing is ignoreDup in PostgreSQL's and SQLite's words.
func onConflictDoNothing(string) string { return ` ON CONFLICT DO NOTHING` }

// The dialects of the three engines.
var (
	Postgres = Dialect{
		dollar:     true,
		anyArray:   true,
		forUpdate:  " FOR UPDATE",
		claimFence: `INSERT INTO fences (name, token) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET token = GREATEST(fences.token, excluded.token)`,
		ignoreDup:  onConflictDoNothing,
	}
	MySQL = Dialect{
		forUpdate:  " FOR UPDATE",
		claimFence: `INSERT INTO fences (name, token) VALUES (?, ?) ON DUPLICATE KEY UPDATE token = GREATEST(token, VALUES(token))`,
		// None: ON DUPLICATE KEY UPDATE key = key (a row whose update sets
		// nothing new counts as no row affected) costs InnoDB more per
		// inserted row than a plain insert (measured: 7% of the server's
		// time writing a backlog); a duplicate fails the statement instead.
		ignoreDup: func(string) string { return `` },
	}
	SQLite = Dialect{
		textTime:   true,
		claimFence: `INSERT INTO fences (name, token) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET token = max(token, excluded.token)`,
		ignoreDup:  onConflictDoNothing,
	}
)

// conn returns c speaking the dialect's placeholders.
func (d Dialect) conn(c Conn) Conn {
	if d.dollar {
		return dollarConn{c}
	}
	return c
}

// in returns the condition that col is one of ids, and its arguments.
func (d Dialect) in(col string, ids []int64) (string, []any) {
	if d.anyArray {
		return col + " = ANY(?)", []any{ids}
	}
	return col + " IN (" + Params(len(ids)) + ")", Args(ids)
}

// time returns t as a query argument, to the millisecond.
func (d Dialect) time(t time.Time) any {
	if d.textTime {
		return TimeText(t)
	}
	return Millis(t)
}

// nullTime is time, or NULL for the zero time.
func (d Dialect) nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return d.time(t)
}

// dollarConn rewrites the placeholders of every statement as $n.
type dollarConn struct{ c Conn }

func (c dollarConn) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	return c.c.Exec(ctx, Dollar(q), args...)
}

func (c dollarConn) Query(ctx context.Context, q string, args []any, scan func(Row) error) error {
	return c.c.Query(ctx, Dollar(q), args, scan)
}

func (c dollarConn) QueryRow(ctx context.Context, q string, args ...any) Row {
	return c.c.QueryRow(ctx, Dollar(q), args...)
}

// IdleTxTimeout is how long PostgreSQL and MySQL let a session of the
// store sit idle inside a transaction before they end the session, and the
// transaction with it: a process frozen, or cut off from the database,
// between BEGIN and COMMIT would otherwise hold its row locks (the
// activity's, which every batch of the sale's orders needs) until the
// server noticed, hours later with TCP's default keepalive. Every
// transaction of the store runs its statements back to back, milliseconds
// apart, so a healthy one never comes near it. A URL that sets the
// server's own variable keeps its value.
const IdleTxTimeout = 15 * time.Second

// TimeFormat is how SQLite stores times: UTC text that its date functions
// understand and that sorts like the times it holds.
const TimeFormat = "2006-01-02 15:04:05.000"

// TimeText formats t as SQLite stores it: t.UTC().Format(TimeFormat),
// written digit by digit (a batch of orders formats two times an order).
func TimeText(t time.Time) string {
	t = t.UTC()
	year, month, day := t.Date()
	if year < 0 || year > 9999 {
		return t.Format(TimeFormat)
	}
	hour, minute, sec := t.Clock()
	var b [len(TimeFormat)]byte
	digits := func(at, v, n int) {
		for i := at + n - 1; i >= at; i-- {
			b[i] = byte('0' + v%10)
			v /= 10
		}
	}
	digits(0, year, 4)
	b[4] = '-'
	digits(5, int(month), 2)
	b[7] = '-'
	digits(8, day, 2)
	b[10] = ' '
	digits(11, hour, 2)
	b[13] = ':'
	digits(14, minute, 2)
	b[16] = ':'
	digits(17, sec, 2)
	b[19] = '.'
	digits(20, t.Nanosecond()/int(time.Millisecond), 3)
	return string(b[:])
}

// TimeDest returns a scan destination for a time column of any engine: a
// time type, or text in TimeFormat (SQLite; any number of fractional
// digits). NULL scans as the zero time; times come out in UTC.
func TimeDest(t *time.Time) sql.Scanner { return timeDest{t} }

type timeDest struct{ t *time.Time }

func (d timeDest) Scan(v any) error {
	switch v := v.(type) {
	case nil:
		*d.t = time.Time{}
	case time.Time:
		*d.t = v.UTC()
	case string:
		return d.parse(v)
	case []byte:
		return d.parse(string(v))
	default:
		return fmt.Errorf("time column holds %T", v)
	}
	return nil
}

func (d timeDest) parse(s string) error {
	t, err := time.Parse(time.DateTime, s)
	if err != nil {
		return err
	}
	*d.t = t
	return nil
}

// nullString is s, or NULL for "".
func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// validText reports whether s is UTF-8 text of at most max bytes without
// control characters: what a VARCHAR column of every engine takes.
func validText(s string, max int) bool {
	return len(s) <= max && utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f })
}
