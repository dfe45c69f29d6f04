package mysql

import "context"

// OpenAt opens the database at url migrated up to version only, as an
// older seckill left it.
func OpenAt(ctx context.Context, url, version string) (*Store, error) { return open(ctx, url, version) }

// OpenAsMySQL opens the database at url as if its server were MySQL, not
// MariaDB: the store sets MySQL's variables.
func OpenAsMySQL(ctx context.Context, url string) (*Store, error) {
	return openAs(ctx, url, "", serverMySQL)
}

// ServerOf tells MariaDB from MySQL as the store does: "mariadb" or "mysql".
var ServerOf = serverOf
