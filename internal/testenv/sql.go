package testenv

import (
	"context"
	"database/sql"
	"net/url"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // driver for MySQLURL and MySQLDSN
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

// MySQLURL returns a mysql:// URL (the form seckill's --db takes) of a fresh,
// empty MySQL/MariaDB database that is dropped when the test ends.
func MySQLURL(t testing.TB) string {
	t.Helper()
	return freshMySQL(t).String()
}

// MySQLDSN returns a go-sql-driver/mysql DSN of a fresh, empty MySQL or
// MariaDB database that is dropped when the test ends: the form for code,
// such as the lock's fencing recipes, that opens the driver itself.
func MySQLDSN(t testing.TB) string {
	t.Helper()
	return mysqlDSN(freshMySQL(t))
}

// freshMySQL creates a database for MySQLURL and MySQLDSN and returns the
// URL of SECKILL_TEST_MYSQL with its path pointing there.
func freshMySQL(t testing.TB) *url.URL {
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
	return u
}

// PingPostgres connects to the PostgreSQL database at rawURL.
func PingPostgres(rawURL string) error {
	db, err := sql.Open("pgx", rawURL)
	if err != nil {
		return err
	}
	defer db.Close()
	return pingDB(db)
}

// PingMySQL connects to the MySQL database at a mysql:// URL.
func PingMySQL(rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return err
	}
	db, err := sql.Open("mysql", mysqlDSN(u))
	if err != nil {
		return err
	}
	defer db.Close()
	return pingDB(db)
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
	// A server that is there answers at once, or refuses at once; one that
	// is there and loaded (a 2-core machine running the whole suite next to
	// other work) took more than 3 s to accept a connection.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return db.PingContext(ctx)
}

// WithParam returns rawURL with its query parameter k set to v.
func WithParam(t testing.TB, rawURL, k, v string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set(k, v)
	u.RawQuery = q.Encode()
	return u.String()
}
