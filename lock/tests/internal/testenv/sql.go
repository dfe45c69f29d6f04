package testenv

import (
	"context"
	"database/sql"
	"net/url"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // driver for MySQLDSN
	_ "github.com/jackc/pgx/v5/stdlib" // driver for PostgresURL
)

// PostgresURL returns the URL of a fresh, empty PostgreSQL database that is
// dropped when the test ends.
func PostgresURL(t testing.TB) string {
	t.Helper()
	base := env("SECKILL_TEST_POSTGRES", DefaultPostgres)
	admin, err := sql.Open("pgx", base)
	if err == nil {
		err = pingDB(admin)
	}
	if err != nil {
		Missing(t, "postgres at %s: %v", base, err)
	}
	name := freshDatabase(t, admin, func(s string) string { return `"` + s + `"` })
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("SECKILL_TEST_POSTGRES: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}

// MySQLDSN returns a go-sql-driver/mysql DSN of a fresh, empty MySQL or
// MariaDB database that is dropped when the test ends.
func MySQLDSN(t testing.TB) string {
	t.Helper()
	base := env("SECKILL_TEST_MYSQL", DefaultMySQL)
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("SECKILL_TEST_MYSQL: %v", err)
	}
	admin, err := sql.Open("mysql", mysqlDSN(u))
	if err == nil {
		err = pingDB(admin)
	}
	if err != nil {
		Missing(t, "mysql at %s: %v", base, err)
	}
	u.Path = "/" + freshDatabase(t, admin, func(s string) string { return "`" + s + "`" })
	return mysqlDSN(u)
}

// mysqlDSN turns mysql://user:pass@host:port/db into the driver's DSN.
func mysqlDSN(u *url.URL) string {
	dsn := ""
	if u.User != nil {
		dsn = u.User.String() + "@"
	}
	return dsn + "tcp(" + u.Host + ")" + u.Path
}

func pingDB(db *sql.DB) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return db.PingContext(ctx)
}
