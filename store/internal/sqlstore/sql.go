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
// in which they are applied; those up to version upTo if it is not "" (for
// tests that build a database of an older version).
func Migrations(fsys fs.FS, dir, upTo string) ([]Migration, error) {
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
		m := Migration{Version: strings.TrimSuffix(path.Base(name), ".sql"), SQL: string(b)}
		if upTo != "" && m.Version > upTo {
			break
		}
		ms = append(ms, m)
	}
	if len(ms) == 0 {
		return nil, fmt.Errorf("no migrations in %s", dir)
	}
	return ms, nil
}

// Query runs q in tx and calls scan for each row (database/sql engines).
func Query(ctx context.Context, tx *sql.Tx, q string, args []any, scan func(Row) error) error {
	return SQLConn(tx).Query(ctx, q, args, scan)
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

// CheckActivityID refuses an activity id that the database handed out if no
// order id can carry it; the caller rolls the insert back.
func CheckActivityID(id int64) error {
	if id > seckill.MaxActivityID {
		return seckill.ErrActivityIDs
	}
	return nil
}
