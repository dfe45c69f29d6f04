package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
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
