// Package store opens the seckill.Store that a database URL names. Each SQL
// engine lives in its own subpackage (postgres, mysql, sqlite); storetest is
// the conformance suite they all pass.
package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	_ "github.com/jackc/pgx/v5/stdlib" // driver "pgx", for SQL

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/store/mysql"
	"github.com/seckilldev/seckill/store/postgres"
	"github.com/seckilldev/seckill/store/sqlite"
)

// Schemes lists the URL forms Open accepts.
const Schemes = "postgres://, postgresql://, mysql:// or sqlite://"

// Open connects to the database that rawURL names, pings it, and applies the
// migrations it lacks:
//
//	postgres://user:pass@host:port/db?sslmode=disable (or postgresql://; any pgx parameter)
//	mysql://user:pass@host:port/db?params             (MySQL 8 or MariaDB; see mysql.Config)
//	sqlite:///abs/path.db, sqlite://relative.db, sqlite://:memory:
func Open(ctx context.Context, rawURL string) (seckill.Store, error) {
	scheme, _, ok := strings.Cut(rawURL, "://")
	if !ok {
		return nil, fmt.Errorf("store: database URL has no scheme: want %s", Schemes)
	}
	var (
		s   seckill.Store
		err error
	)
	// Each case assigns err and s separately: a nil *postgres.Store stored
	// in the interface would make s non-nil on failure.
	switch strings.ToLower(scheme) {
	case "postgres", "postgresql":
		var pg *postgres.Store
		if pg, err = postgres.Open(ctx, rawURL); err == nil {
			s = pg
		}
	case "mysql":
		var my *mysql.Store
		if my, err = mysql.Open(ctx, rawURL); err == nil {
			s = my
		}
	case "sqlite":
		var lite *sqlite.Store
		if lite, err = sqlite.Open(ctx, rawURL); err == nil {
			s = lite
		}
	default:
		err = fmt.Errorf("store: unsupported database URL scheme %q: want %s", scheme, Schemes)
	}
	return s, err
}

// SQL opens a database/sql handle on the database that rawURL names, in the
// forms Open takes, without pinging or migrating it: for tools that read the
// tables directly (the invariant checker, tests). The caller closes it.
func SQL(rawURL string) (*sql.DB, error) {
	scheme, _, ok := strings.Cut(rawURL, "://")
	if !ok {
		return nil, fmt.Errorf("store: database URL has no scheme: want %s", Schemes)
	}
	switch strings.ToLower(scheme) {
	case "postgres", "postgresql":
		return sql.Open("pgx", rawURL)
	case "mysql":
		cfg, err := mysql.Config(rawURL)
		if err != nil {
			return nil, err
		}
		return sql.Open("mysql", cfg.FormatDSN())
	case "sqlite":
		dsn, err := sqlite.DSN(rawURL)
		if err != nil {
			return nil, err
		}
		return sql.Open("sqlite", dsn)
	}
	return nil, fmt.Errorf("store: unsupported database URL scheme %q: want %s", scheme, Schemes)
}
