// Package register is the resource the lock tests protect: one integer in
// a PostgreSQL row that each critical section reads and then sets to the
// value read plus one, optionally with a fencing check, and the history of
// those critical sections, checked for linearizability with porcupine.
//
// Under mutual exclusion the critical sections form a linearizable
// history of "read v, write v+1" operations on a register; two holders at
// once show up as two operations that read the same value and wrote, which
// no sequential order explains (and, plainly, as a lost update).
package register

import (
	"context"
	"database/sql"
	"fmt"

	_ "github.com/jackc/pgx/v5/stdlib" // driver "pgx"
)

// Op is one critical section, as its client saw it.
type Op struct {
	Client int   `json:"client"`
	Call   int64 `json:"call"`   // unix nanoseconds before the read
	Return int64 `json:"return"` // unix nanoseconds after the write
	Read   int64 `json:"read"`   // the value read
	// Wrote reports whether the write of Read+1 took effect: false when the
	// fencing check refused it.
	Wrote bool `json:"wrote"`
	// Token is the fencing token the lock gave.
	Token int64 `json:"token"`
}

// Register is the row. Create makes it; each client opens it.
type Register struct {
	db *sql.DB
}

// Open connects to the PostgreSQL database at url.
func Open(ctx context.Context, url string) (*Register, error) {
	db, err := sql.Open("pgx", url)
	if err != nil {
		return nil, err
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("register: %w", err)
	}
	db.SetMaxOpenConns(2)
	return &Register{db: db}, nil
}

// Close closes the connection.
func (r *Register) Close() error { return r.db.Close() }

// Create makes the register, with value 0 and no fencing token seen.
func (r *Register) Create(ctx context.Context) error {
	_, err := r.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS register (id INT PRIMARY KEY, v BIGINT NOT NULL, fence BIGINT NOT NULL);
INSERT INTO register (id, v, fence) VALUES (1, 0, 0) ON CONFLICT (id) DO NOTHING`)
	return err
}

// Read returns the value.
func (r *Register) Read(ctx context.Context) (int64, error) {
	var v int64
	err := r.db.QueryRowContext(ctx, `SELECT v FROM register WHERE id = 1`).Scan(&v)
	return v, err
}

// Write sets the value. With a fencing token (fence > 0) the write takes
// effect only if no write with a token as large or larger came before, the
// check a resource must make for a lease lock to protect it; it reports
// whether the write took effect.
func (r *Register) Write(ctx context.Context, v, fence int64) (bool, error) {
	if fence <= 0 {
		_, err := r.db.ExecContext(ctx, `UPDATE register SET v = $1 WHERE id = 1`, v)
		return err == nil, err
	}
	res, err := r.db.ExecContext(ctx, `UPDATE register SET v = $1, fence = $2 WHERE id = 1 AND fence < $2`, v, fence)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}
