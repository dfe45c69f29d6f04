package check

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strings"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // driver "pgx"
	_ "modernc.org/sqlite"             // driver "sqlite"
)

// Open connects to the database named by a URL, as the service's --db
// takes it: postgres://user:pass@host:port/db?sslmode=disable (or
// postgresql://), mysql://user:pass@host:port/db, or sqlite://PATH
// (sqlite:///abs/path.db, sqlite://rel/path.db). The connection is pinged
// before Open returns; the caller closes it.
func Open(ctx context.Context, dbURL string) (*sql.DB, error) {
	driver, dsn, err := driverDSN(dbURL)
	if err != nil {
		return nil, err
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return nil, fmt.Errorf("check: open %s: %w", redact(dbURL), err)
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("check: connect to %s: %w", redact(dbURL), err)
	}
	return db, nil
}

func driverDSN(dbURL string) (driver, dsn string, err error) {
	scheme, rest, ok := strings.Cut(dbURL, "://")
	if !ok {
		return "", "", fmt.Errorf("check: database URL %q has no scheme (postgres://, mysql://, sqlite://)", redact(dbURL))
	}
	switch scheme {
	case "postgres", "postgresql":
		return "pgx", dbURL, nil
	case "sqlite", "sqlite3":
		if rest == "" {
			return "", "", fmt.Errorf("check: database URL %q has no path", dbURL)
		}
		// Wait for the order worker's write lock instead of failing.
		sep := "?"
		if strings.Contains(rest, "?") {
			sep = "&"
		}
		if !strings.Contains(rest, "busy_timeout") {
			rest += sep + "_pragma=busy_timeout(5000)"
		}
		return "sqlite", rest, nil
	case "mysql", "mariadb":
		u, err := url.Parse(dbURL)
		if err != nil {
			return "", "", fmt.Errorf("check: database URL: %w", err)
		}
		cfg := mysql.NewConfig()
		if u.User != nil {
			cfg.User = u.User.Username()
			cfg.Passwd, _ = u.User.Password()
		}
		cfg.Net = "tcp"
		cfg.Addr = u.Host
		if u.Port() == "" {
			cfg.Addr = u.Host + ":3306"
		}
		cfg.DBName = strings.TrimPrefix(u.Path, "/")
		for k, vs := range u.Query() {
			if cfg.Params == nil {
				cfg.Params = map[string]string{}
			}
			cfg.Params[k] = vs[len(vs)-1]
		}
		return "mysql", cfg.FormatDSN(), nil
	}
	return "", "", fmt.Errorf("check: unsupported database URL scheme %q (postgres://, mysql://, sqlite://)", scheme)
}

// redact hides a password in a URL for error messages.
func redact(dbURL string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		return "database URL"
	}
	return u.Redacted()
}
