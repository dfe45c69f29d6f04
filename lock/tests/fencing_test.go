package tests

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redis/go-redis/v9"
	_ "modernc.org/sqlite"

	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/lock"
)

// A counter is a resource that checks fencing tokens: holders of a lock
// read it, add one, and write it back. Each engine has the two recipes:
//
//   - claim: the read claims the token too (the README's rule: every access
//     that the decision depends on, reads included, goes through the fence);
//   - blind: a plain read, and only the write fenced (the recipe the README
//     used to give, which loses updates when a holder pauses between its
//     read and its write).
type counter interface {
	// read returns the value; ok is false when the fence refused the token.
	read(ctx context.Context, token int64, claim bool) (v int64, ok bool, err error)
	// write stores v; ok is false when the fence refused the token.
	write(ctx context.Context, token, v int64) (ok bool, err error)
}

// sqlCounter is the recipe in SQL: a fence column next to the data.
type sqlCounter struct {
	db *sql.DB
	// claim reads v and sets fence to the token if fence <= token, in one
	// statement where the engine has UPDATE ... RETURNING (PostgreSQL,
	// SQLite); MySQL claims, then reads the row only if the fence is still
	// its token.
	claim     func(ctx context.Context, db *sql.DB, token int64) (int64, bool, error)
	update    string                     // UPDATE ... SET v, fence WHERE fence <= token
	writeArgs func(token, v int64) []any // its parameters
	plain     string                     // the blind read
}

func (s *sqlCounter) read(ctx context.Context, token int64, claim bool) (int64, bool, error) {
	if claim {
		return s.claim(ctx, s.db, token)
	}
	var v int64
	err := s.db.QueryRowContext(ctx, s.plain).Scan(&v)
	return v, err == nil, err
}

func (s *sqlCounter) write(ctx context.Context, token, v int64) (bool, error) {
	res, err := s.db.ExecContext(ctx, s.update, s.writeArgs(token, v)...)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// claimReturning is the claim of PostgreSQL and SQLite: one statement.
func claimReturning(q string) func(ctx context.Context, db *sql.DB, token int64) (int64, bool, error) {
	return func(ctx context.Context, db *sql.DB, token int64) (int64, bool, error) {
		var v int64
		err := db.QueryRowContext(ctx, q, token).Scan(&v)
		if errors.Is(err, sql.ErrNoRows) {
			return 0, false, nil // a newer token has been here
		}
		return v, err == nil, err
	}
}

// claimMySQL is the claim of MySQL and MariaDB, which have no UPDATE ...
// RETURNING: set the fence, then read the row only if the fence is still
// ours. A newer holder that claims in between makes the read find nothing.
func claimMySQL(ctx context.Context, db *sql.DB, token int64) (int64, bool, error) {
	if _, err := db.ExecContext(ctx, `UPDATE counter SET fence = ? WHERE id = 1 AND fence <= ?`, token, token); err != nil {
		return 0, false, err
	}
	var v int64
	err := db.QueryRowContext(ctx, `SELECT v FROM counter WHERE id = 1 AND fence = ?`, token).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	return v, err == nil, err
}

func newSQLCounter(t *testing.T, engine string) counter {
	var driver, dsn string
	switch engine {
	case "postgres":
		driver, dsn = "pgx", testenv.PostgresURL(t)
	case "mysql":
		// clientFoundRows: an UPDATE reports the rows it matched, not only
		// those it changed, so that a write of an unchanged row counts
		driver, dsn = "mysql", testenv.MySQLDSN(t)+"?clientFoundRows=true"
	case "sqlite":
		driver, dsn = "sqlite", ":memory:"
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if engine == "sqlite" {
		db.SetMaxOpenConns(1) // one in-memory database
	}
	for _, q := range []string{
		`CREATE TABLE counter (id INT PRIMARY KEY, v BIGINT NOT NULL, fence BIGINT NOT NULL DEFAULT 0)`,
		`INSERT INTO counter (id, v) VALUES (1, 0)`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	c := &sqlCounter{db: db, plain: `SELECT v FROM counter WHERE id = 1`,
		writeArgs: func(token, v int64) []any { return []any{v, token} }}
	switch engine {
	case "postgres":
		c.claim = claimReturning(`UPDATE counter SET fence = $1 WHERE id = 1 AND fence <= $1 RETURNING v`)
		c.update = `UPDATE counter SET v = $1, fence = $2 WHERE id = 1 AND fence <= $2`
	case "sqlite":
		c.claim = claimReturning(`UPDATE counter SET fence = ?1 WHERE id = 1 AND fence <= ?1 RETURNING v`)
		c.update = `UPDATE counter SET v = ?1, fence = ?2 WHERE id = 1 AND fence <= ?2`
	case "mysql":
		c.claim = claimMySQL
		c.update = `UPDATE counter SET v = ?, fence = ? WHERE id = 1 AND fence <= ?`
		c.writeArgs = func(token, v int64) []any { return []any{v, token, token} } // no numbered parameters
	}
	return c
}

// redisCounter is the recipe in Redis: scripts that begin with lock.FenceLua.
type redisCounter struct {
	rdb  *redis.Client
	keys []string // the value, the fence: one hash slot
}

var (
	fencedGet = redis.NewScript(lock.FenceLua + `
if not fence(KEYS[2], ARGV[1]) then return redis.error_reply('FENCED') end
return tonumber(redis.call('get', KEYS[1]) or '0')`)
	fencedSet = redis.NewScript(lock.FenceLua + `
if not fence(KEYS[2], ARGV[1]) then return redis.error_reply('FENCED') end
redis.call('set', KEYS[1], ARGV[2])
return 1`)
)

func (r *redisCounter) read(ctx context.Context, token int64, claim bool) (int64, bool, error) {
	if !claim {
		v, err := r.rdb.Get(ctx, r.keys[0]).Int64()
		if errors.Is(err, redis.Nil) {
			return 0, true, nil
		}
		return v, err == nil, err
	}
	v, err := fencedGet.Run(ctx, r.rdb, r.keys, token).Int64()
	if err != nil && strings.Contains(err.Error(), "FENCED") {
		return 0, false, nil
	}
	return v, err == nil, err
}

func (r *redisCounter) write(ctx context.Context, token, v int64) (bool, error) {
	err := fencedSet.Run(ctx, r.rdb, r.keys, token, v).Err()
	if err != nil && strings.Contains(err.Error(), "FENCED") {
		return false, nil
	}
	return err == nil, err
}

// rmw is the outcome of one read-modify-write under the lock.
type rmw struct {
	read   int64
	readOK bool // the read was not refused
	wrote  bool // the write was accepted
}

// counterModel: a register that each operation reads, and, if its write
// was accepted, sets to what it read plus one. A refused read tells
// nothing; a refused write makes the operation a read.
var counterModel = porcupine.Model{
	Init: func() any { return int64(0) },
	Step: func(state, _, output any) (bool, any) {
		v, o := state.(int64), output.(rmw)
		switch {
		case !o.readOK:
			return true, v
		case o.read != v:
			return false, v
		case o.wrote:
			return true, v + 1
		}
		return true, v
	},
}

// history runs clients goroutines that each make ops read-modify-writes of
// the counter under the lock name (a fixed lease), one of which, per
// client, pauses after its read until its lease has run out and another
// holder has read: the pause of a GC or a stopped VM, past which the
// holder writes anyway. It returns the history and how many writes the
// fence refused.
func history(t *testing.T, c *lock.Client, name string, res counter, claim bool, clients, ops int) ([]porcupine.Operation, int) {
	const lease = 60 * time.Millisecond
	take := func(ctx context.Context, id int) (*lock.Lock, error) { return c.Lock(ctx, name, lock.WithTTL(lease)) }
	return pausedHistory(t, take, nil, res, claim, clients, ops)
}

// pausedHistory is history with holds taken by take (for goroutine id);
// freeze, when given, is called as goroutine id pauses and returns what
// ends the pause (the freeze of its process, say).
func pausedHistory(t *testing.T, take func(ctx context.Context, id int) (*lock.Lock, error), freeze func(id int) func(),
	res counter, claim bool, clients, ops int) ([]porcupine.Operation, int) {
	ctx := ctxTimeout(t, time.Minute)
	base := time.Now()
	var (
		mu       sync.Mutex
		hist     []porcupine.Operation
		reads    atomic.Int64
		refusals atomic.Int32
		wg       sync.WaitGroup
	)
	for id := range clients {
		wg.Go(func() {
			for i := range ops {
				l, err := take(ctx, id)
				if err != nil {
					t.Error(err)
					return
				}
				call := time.Since(base).Nanoseconds()
				var o rmw
				o.read, o.readOK, err = res.read(ctx, l.Token(), claim)
				if err != nil {
					t.Error(err)
					return
				}
				if o.readOK {
					seen := reads.Add(1)
					if i == (id*3)%ops {
						// the pause: past the lease, until another holder has read
						thaw := func() {}
						if freeze != nil {
							thaw = freeze(id)
						}
						time.Sleep(time.Until(l.ValidUntil()))
						for deadline := time.Now().Add(time.Second); reads.Load() == seen && time.Now().Before(deadline); {
							time.Sleep(100 * time.Microsecond)
						}
						thaw()
					} else {
						time.Sleep(2 * time.Millisecond)
					}
					o.wrote, err = res.write(ctx, l.Token(), o.read+1)
					if err != nil {
						t.Error(err)
						return
					}
					if !o.wrote {
						refusals.Add(1)
					}
				}
				ret := time.Since(base).Nanoseconds()
				l.Unlock(ctx)
				mu.Lock()
				hist = append(hist, porcupine.Operation{ClientId: id, Call: call, Output: o, Return: ret})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return hist, int(refusals.Load())
}

// reset sets the counter and its fence back to 0 between two histories.
func reset(t *testing.T, res counter) {
	var err error
	switch r := res.(type) {
	case *sqlCounter:
		_, err = r.db.Exec(`UPDATE counter SET v = 0, fence = 0 WHERE id = 1`)
	case *redisCounter:
		err = r.rdb.Del(context.Background(), r.keys...).Err()
	}
	if err != nil {
		t.Fatal(err)
	}
}

// tally counts the histories of one recipe and their verdicts.
type tally struct {
	histories, ops, illegal, unknown, refused int
}

// add checks one history with porcupine; refused is how many of its writes
// the fence refused.
func (k *tally) add(hist []porcupine.Operation, refused int) {
	k.histories++
	k.ops += len(hist)
	k.refused += refused
	switch porcupine.CheckOperationsTimeout(counterModel, hist, 30*time.Second) {
	case porcupine.Illegal:
		k.illegal++
	case porcupine.Unknown:
		k.unknown++
	}
}

// judge logs the tally of what ran (engine, say) and fails the test
// unless, with the read claiming the token, every history is linearizable
// and some stale write was refused, and, with the blind recipe (the
// control), some history is illegal.
func (k tally) judge(t *testing.T, what string, claim bool) {
	t.Helper()
	recipe := map[bool]string{true: "claim", false: "blind"}[claim]
	t.Logf("%s, %s recipe: %d histories (%d operations), %d illegal, %d unknown; %d stale writes refused",
		what, recipe, k.histories, k.ops, k.illegal, k.unknown, k.refused)
	if claim && (k.illegal > 0 || k.unknown > 0) {
		t.Errorf("%s: %d of %d histories illegal (%d unknown) with the reads claiming the token", what, k.illegal, k.histories, k.unknown)
	}
	if claim && k.refused == 0 {
		t.Errorf("%s: no stale write was refused: the pauses did not overlap holders", what)
	}
	if !claim && k.illegal == 0 {
		t.Errorf("%s: the blind recipe lost no update in %d histories: the test does not catch what it should", what, k.histories)
	}
}

// TestFencingLinearizable checks, with porcupine, histories of holders
// that pause past their lease between a read and a write, on every engine
// the README gives the recipe for. With the read claiming the token, every
// history is linearizable: the stale holder's write is refused. With the
// blind read (the control), updates are lost: illegal histories are found.
func TestFencingLinearizable(t *testing.T) {
	const histories, clients, ops = 6, 8, 6
	engines := []string{"sqlite", "postgres", "mysql", "redis"}
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			addr := testenv.RedisAddr(t)
			c := newClient(t, dialRueidis(t, addr), testenv.Prefix(t)+":")
			var res counter
			if engine == "redis" {
				p := testenv.Prefix(t)
				res = &redisCounter{rdb: rawClient(t, addr), keys: []string{p + "{c}:v", p + "{c}:fence"}}
			} else {
				res = newSQLCounter(t, engine)
			}
			for _, claim := range []bool{true, false} {
				recipe := map[bool]string{true: "claim", false: "blind"}[claim]
				var k tally
				for h := range histories {
					reset(t, res)
					k.add(history(t, c, fmt.Sprintf("%s-%d", recipe, h), res, claim, clients, ops))
				}
				k.judge(t, engine, claim)
			}
		})
	}
}
