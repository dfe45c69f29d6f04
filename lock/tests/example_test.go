package tests

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	_ "modernc.org/sqlite"

	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/lock"
	"github.com/seckilldev/seckill/lock/goredis"
	"github.com/seckilldev/seckill/lock/rueidislock"
)

// The examples talk to the Redis on 127.0.0.1:6379 (SECKILL_TEST_REDIS
// overrides it), each under a prefix of its own so that test runs sharing
// that Redis never meet.
var (
	exampleAddr   = cmp.Or(os.Getenv("SECKILL_TEST_REDIS"), testenv.DefaultRedis)
	examplePrefix = "example:" + testenv.RandHex(4) + ":"
)

// TestMain leaves the examples out when that Redis does not answer (and
// fails the run in CI): an example checks its output and cannot skip.
func TestMain(m *testing.M) {
	os.Exit(testenv.RunExamplesNeeding(m, "redis at "+exampleAddr, testenv.PingRedis(exampleAddr)))
}

func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locks := lock.New(goredis.New(rdb), lock.WithPrefix(examplePrefix))
	defer locks.Close()
	ctx := context.Background()

	// Wait at most a second for the lock of activity 42.
	wctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	l, err := locks.Lock(wctx, "activity:42")
	if err != nil {
		fmt.Println("busy:", err)
		return
	}
	defer l.Unlock(ctx)

	// The watchdog renews the lock while we hold it; l.Context() ends if the
	// lock is lost anyway, and work under the lock must stop then.
	if err := restock(l.Context(), l.Token()); err != nil {
		fmt.Println("stopped:", err)
		return
	}
	fmt.Println("restocked under the lock")
	// Output: restocked under the lock
}

func restock(ctx context.Context, token int64) error { return ctx.Err() }

func ExampleClient_TryLock() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locks := lock.New(goredis.New(rdb), lock.WithPrefix(examplePrefix))
	defer locks.Close()
	ctx := context.Background()

	first, err := locks.TryLock(ctx, "report", lock.WithTTL(time.Minute))
	if err != nil {
		panic(err)
	}
	_, err = locks.TryLock(ctx, "report")
	fmt.Println("second try:", err)

	fmt.Println("unlock:", first.Unlock(ctx))
	fmt.Println("unlock again:", first.Unlock(ctx))
	// Output:
	// second try: lock: not obtained
	// unlock: <nil>
	// unlock again: lock: not held
}

func ExampleClient_Lock_timeout() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locks := lock.New(goredis.New(rdb), lock.WithPrefix(examplePrefix))
	defer locks.Close()
	ctx := context.Background()

	held, _ := locks.TryLock(ctx, "busy")
	defer held.Unlock(ctx)

	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err := locks.Lock(wctx, "busy")
	fmt.Println(errors.Is(err, lock.ErrNotObtained), errors.Is(err, context.DeadlineExceeded))
	// Output: true true
}

func ExampleWithRetry() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locks := lock.New(goredis.New(rdb), lock.WithPrefix(examplePrefix))
	defer locks.Close()
	ctx := context.Background()

	held, _ := locks.TryLock(ctx, "retry")
	defer held.Unlock(ctx)

	// Three more attempts, 10 ms apart (a release would wake us earlier).
	_, err := locks.Lock(ctx, "retry", lock.WithRetry(lock.LimitRetry(lock.LinearBackoff(10*time.Millisecond), 3)))
	fmt.Println(err)
	// Output: lock: not obtained
}

func ExampleWithReentrant() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locks := lock.New(goredis.New(rdb), lock.WithPrefix(examplePrefix))
	defer locks.Close()
	ctx := context.Background()

	job := lock.WithReentrant("job-7") // the owner: who may take it again
	outer, _ := locks.TryLock(ctx, "ledger", job)
	inner, err := locks.TryLock(ctx, "ledger", job)
	fmt.Println("reentered:", err == nil, "same token:", inner.Token() == outer.Token())

	inner.Unlock(ctx)
	_, err = locks.TryLock(ctx, "ledger")
	fmt.Println("after one release:", err)
	outer.Unlock(ctx)
	free, err := locks.TryLock(ctx, "ledger")
	fmt.Println("after both:", err)
	free.Unlock(ctx)
	// Output:
	// reentered: true same token: true
	// after one release: lock: not obtained
	// after both: <nil>
}

// The fencing token protects the data when the lock itself fails: here
// holder A reads the stock and stalls past its lease (a GC pause, a stopped
// VM); holder B takes the lock, reads and writes; A wakes up and writes
// what it computed from a stale read. The database keeps the largest token
// it has seen, and every access claims it, the read included: B's read
// already refused A, so A's write changes nothing. (Had A's read not
// claimed its token, its write would have been accepted, B's too, and one
// sale lost.)
func Example_fencing() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locks := lock.New(goredis.New(rdb), lock.WithPrefix(examplePrefix))
	defer locks.Close()
	ctx := context.Background()

	db, _ := sql.Open("sqlite", ":memory:")
	defer db.Close()
	db.SetMaxOpenConns(1)
	db.Exec(`CREATE TABLE stock (id INTEGER PRIMARY KEY, qty INTEGER, fence INTEGER NOT NULL DEFAULT 0)`)
	db.Exec(`INSERT INTO stock (id, qty) VALUES (42, 100)`)
	// read claims the row for token: it fails once a larger token has
	// been here.
	read := func(token int64) (qty int, ok bool) {
		err := db.QueryRow(`UPDATE stock SET fence = ?1 WHERE id = 42 AND fence <= ?1 RETURNING qty`, token).Scan(&qty)
		return qty, err == nil
	}
	write := func(token int64, qty int) bool {
		res, _ := db.Exec(`UPDATE stock SET qty = ?1, fence = ?2 WHERE id = 42 AND fence <= ?2`, qty, token)
		n, _ := res.RowsAffected()
		return n == 1
	}

	a, _ := locks.TryLock(ctx, "stock:42", lock.WithTTL(500*time.Millisecond))
	qtyA, _ := read(a.Token())
	time.Sleep(600 * time.Millisecond) // A stalls; its lease runs out
	b, _ := locks.TryLock(ctx, "stock:42")
	qtyB, _ := read(b.Token())
	fmt.Println("B writes:", write(b.Token(), qtyB-1))
	fmt.Println("A writes late:", write(a.Token(), qtyA-1))
	b.Unlock(ctx)

	var qty int
	db.QueryRow(`SELECT qty FROM stock WHERE id = 42`).Scan(&qty)
	fmt.Println("qty:", qty)
	// Output:
	// B writes: true
	// A writes late: false
	// qty: 99
}

// Data in Redis is fenced by scripts that start with lock.FenceLua and
// call fence on every access, reads included.
func ExampleFenceLua() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locks := lock.New(goredis.New(rdb), lock.WithPrefix(examplePrefix))
	defer locks.Close()
	ctx := context.Background()

	decr := redis.NewScript(lock.FenceLua + `
if not fence(KEYS[2], ARGV[1]) then return redis.error_reply('FENCED a newer holder was here') end
return redis.call('decr', KEYS[1])`)
	keys := []string{examplePrefix + "qty:{7}", examplePrefix + "qty:{7}:fence"}
	rdb.Set(ctx, keys[0], 10, time.Minute)

	old, _ := locks.TryLock(ctx, "stock:7", lock.WithTTL(500*time.Millisecond))
	time.Sleep(600 * time.Millisecond) // old's lease runs out
	cur, _ := locks.TryLock(ctx, "stock:7")
	fmt.Println(decr.Run(ctx, rdb, keys, cur.Token()).Val())
	fmt.Println(decr.Run(ctx, rdb, keys, old.Token()).Err())
	cur.Unlock(ctx)
	rdb.Del(ctx, keys...)
	// Output:
	// 9
	// FENCED a newer holder was here
}

// A semaphore: at most 2 holders at once; each permit has a slot and a
// fencing token.
func ExampleClient_Semaphore() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locks := lock.New(goredis.New(rdb), lock.WithPrefix(examplePrefix))
	defer locks.Close()
	ctx := context.Background()

	renders := locks.Semaphore("pdf-render", 2)
	p1, _ := renders.Acquire(ctx)
	p2, _ := renders.Acquire(ctx)
	_, err := renders.TryAcquire(ctx)
	fmt.Println("slots:", p1.Slot(), p2.Slot(), "third:", err)
	p1.Unlock(ctx)
	p3, _ := renders.TryAcquire(ctx)
	fmt.Println("after a release: slot", p3.Slot())
	p2.Unlock(ctx)
	p3.Unlock(ctx)
	// Output:
	// slots: 0 1 third: lock: not obtained
	// after a release: slot 0
}

// A read-write lock: readers together, a writer alone.
func ExampleClient_RWLock() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locks := lock.New(goredis.New(rdb), lock.WithPrefix(examplePrefix))
	defer locks.Close()
	ctx := context.Background()

	catalog := locks.RWLock("catalog")
	r1, _ := catalog.RLock(ctx)
	r2, err := catalog.TryRLock(ctx)
	fmt.Println("second reader:", err)
	_, err = catalog.TryLock(ctx)
	fmt.Println("writer:", err)
	r1.Unlock(ctx)
	r2.Unlock(ctx)
	w, err := catalog.TryLock(ctx)
	fmt.Println("writer after the readers:", err)
	w.Unlock(ctx)
	// Output:
	// second reader: <nil>
	// writer: lock: not obtained
	// writer after the readers: <nil>
}

// Inspect shows who holds a lock; ForceUnlock removes it and says what it
// removed.
func ExampleClient_ForceUnlock() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locks := lock.New(goredis.New(rdb), lock.WithPrefix(examplePrefix))
	defer locks.Close()
	ctx := context.Background()

	held, _ := locks.TryLock(ctx, "nightly-report", lock.WithMetadata("host-7 pid 4242"))
	st, _ := locks.Inspect(ctx, "nightly-report")
	fmt.Println(st.Kind, len(st.Holds), st.Holds[0].Metadata, st.Holds[0].Token == held.Token())

	removed, _ := locks.ForceUnlock(ctx, "nightly-report")
	fmt.Println("removed:", removed.Holds[0].Metadata)
	locked, _ := locks.IsLocked(ctx, "nightly-report")
	fmt.Println("locked:", locked)
	// Output:
	// mutex 1 host-7 pid 4242 true
	// removed: host-7 pid 4242
	// locked: false
}

// Lock.Context ends as soon as the lock is known lost: here someone deletes
// the key behind the holder's back, and the next renewal notices.
func ExampleLock_Context() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locks := lock.New(goredis.New(rdb), lock.WithPrefix(examplePrefix))
	defer locks.Close()
	ctx := context.Background()

	l, _ := locks.Lock(ctx, "job", lock.WithWatchdog(time.Second))
	rdb.Del(ctx, examplePrefix+"{job}")
	<-l.Done()
	fmt.Println(context.Cause(l.Context()))
	// Output: lock: lost: renewal refused: the lock expired or was taken over
}

func ExampleNewRedlock() {
	// Five independent Redis servers in production; here five databases of
	// one, for the sake of a runnable example.
	var nodes []lock.Redis
	for db := range 5 {
		rdb := redis.NewClient(&redis.Options{Addr: exampleAddr, DB: db, ContextTimeoutEnabled: true})
		defer rdb.Close()
		nodes = append(nodes, goredis.New(rdb))
	}
	locks := lock.NewRedlock(nodes, lock.WithPrefix(examplePrefix))
	defer locks.Close()
	ctx := context.Background()

	l, err := locks.TryLock(ctx, "settlement", lock.WithTTL(10*time.Second))
	if err != nil {
		panic(err)
	}
	fmt.Println("tokens from", len(l.Tokens()), "nodes")
	fmt.Println(l.Unlock(ctx))
	// Output:
	// tokens from 5 nodes
	// <nil>
}

func ExampleNew_rueidis() {
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{exampleAddr}})
	if err != nil {
		panic(err)
	}
	defer rc.Close()
	locks := lock.New(rueidislock.New(rc), lock.WithPrefix(examplePrefix))
	defer locks.Close()
	ctx := context.Background()

	l, err := locks.TryLock(ctx, "activity:7")
	if err != nil {
		panic(err)
	}
	fmt.Println(l.Key(), l.Token() > 0)
	l.Unlock(ctx)
	// Output: activity:7 true
}
