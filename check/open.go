package check

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"

	"github.com/seckilldev/seckill/store"
)

// Open connects to the database named by a URL, as the service's --db
// takes it (see store.Open): postgres://user:pass@host:port/db (or
// postgresql://), mysql://user:pass@host:port/db, or sqlite://PATH. The
// connection is pinged before Open returns; the caller closes it.
func Open(ctx context.Context, dbURL string) (*sql.DB, error) {
	db, err := store.SQL(dbURL)
	if err != nil {
		return nil, fmt.Errorf("check: open %s: %w", redact(dbURL), err)
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("check: connect to %s: %w", redact(dbURL), err)
	}
	return db, nil
}

// redact hides a password in a URL for error messages.
func redact(dbURL string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		return "database URL"
	}
	return u.Redacted()
}
