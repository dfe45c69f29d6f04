package sqlite

import "context"

// OpenAt opens the database at url migrated up to version only, as an
// older seckill left it.
func OpenAt(ctx context.Context, url, version string) (*Store, error) { return open(ctx, url, version) }
