package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/seckilldev/seckill"
)

// Params returns n comma-separated ? placeholders: "?,?,?".
func Params(n int) string {
	if n <= 0 {
		return ""
	}
	return strings.Repeat("?,", n-1) + "?"
}

// Rows returns n copies of row separated by commas, for a multi-row VALUES.
func Rows(row string, n int) string {
	if n <= 0 {
		return ""
	}
	return strings.Repeat(row+",", n-1) + row
}

// Migration is one embedded migration file; Version is its name without
// ".sql", recorded in schema_migrations once applied.
type Migration struct {
	Version string
	SQL     string
}

// Migrations returns the *.sql files of dir in fsys sorted by name: the order
// in which they are applied.
func Migrations(fsys fs.FS, dir string) ([]Migration, error) {
	names, err := fs.Glob(fsys, path.Join(dir, "*.sql"))
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	ms := make([]Migration, 0, len(names))
	for _, name := range names {
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		ms = append(ms, Migration{Version: strings.TrimSuffix(path.Base(name), ".sql"), SQL: string(b)})
	}
	if len(ms) == 0 {
		return nil, fmt.Errorf("no migrations in %s", dir)
	}
	return ms, nil
}

// Query runs q in tx and calls scan for each row (database/sql engines).
func Query(ctx context.Context, tx *sql.Tx, q string, args []any, scan func(*sql.Rows) error) error {
	rows, err := tx.QueryContext(ctx, q, args...)
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

// Args turns ids into query arguments.
func Args(ids []int64) []any {
	a := make([]any, len(ids))
	for i, id := range ids {
		a[i] = id
	}
	return a
}

// Row is a row read with QueryRow: *sql.Row and pgx.Row both are.
type Row interface{ Scan(dest ...any) error }

// Dollar rewrites the ? placeholders of q as $1, $2, ... (PostgreSQL's
// form), so that a query shared by the engines is written once.
func Dollar(q string) string {
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// lastOrderIDQuery reads the highest id of an order id range in orders and
// in order_failures: two probes of their primary keys, whatever the number
// of orders. Two scalar subqueries rather than a UNION of two LIMIT 1
// queries, which SQLite cannot parenthesize.
const lastOrderIDQuery = `
SELECT (SELECT MAX(id) FROM orders WHERE id BETWEEN ? AND ?),
       (SELECT MAX(order_id) FROM order_failures WHERE order_id BETWEEN ? AND ?)`

// LastOrderID is the body of every engine's Store.LastOrderID: queryRow runs
// a query with ? placeholders (dollar: rewritten as $n) and the arguments.
func LastOrderID(activityID int64, dollar bool, queryRow func(q string, args ...any) Row) (int64, error) {
	q := lastOrderIDQuery
	if dollar {
		q = Dollar(q)
	}
	lo, hi := seckill.OrderID(activityID, 1), seckill.OrderID(activityID, seckill.MaxOrderLocal)
	var confirmed, failed sql.NullInt64
	if err := queryRow(q, lo, hi, lo, hi).Scan(&confirmed, &failed); err != nil {
		return 0, err
	}
	return max(confirmed.Int64, failed.Int64), nil
}

// CheckActivityID refuses an activity id that the database handed out if no
// order id can carry it; the caller rolls the insert back.
func CheckActivityID(id int64) error {
	if id > seckill.MaxActivityID {
		return seckill.ErrActivityIDs
	}
	return nil
}
