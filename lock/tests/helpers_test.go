package tests

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/lock"
	"github.com/seckilldev/seckill/lock/goredis"
	"github.com/seckilldev/seckill/lock/rueidislock"
)

// adapter makes a lock.Redis for one Redis address.
type adapter struct {
	name string
	dial func(t testing.TB, addr string) lock.Redis
}

var adapters = []adapter{
	{"goredis", dialGoRedis},
	{"rueidis", dialRueidis},
}

func dialGoRedis(t testing.TB, addr string) lock.Redis {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { c.Close() })
	return goredis.New(c)
}

func dialRueidis(t testing.TB, addr string) lock.Redis {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableRetry: true,
		ConnWriteTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return rueidislock.New(c)
}

// forEachAdapter runs f as a parallel subtest per adapter against the shared
// Redis, with a fresh key prefix.
func forEachAdapter(t *testing.T, f func(t *testing.T, a adapter, r lock.Redis, prefix string)) {
	addr := testenv.RedisAddr(t)
	for _, a := range adapters {
		t.Run(a.name, func(t *testing.T) {
			t.Parallel()
			f(t, a, a.dial(t, addr), testenv.Prefix(t)+":")
		})
	}
}

// newClient returns a lock client closed at the end of the test.
func newClient(t testing.TB, r lock.Redis, prefix string, opts ...lock.Option) *lock.Client {
	t.Helper()
	c := lock.New(r, append([]lock.Option{lock.WithPrefix(prefix)}, opts...)...)
	t.Cleanup(func() { c.Close() })
	return c
}

// rawClient is a plain go-redis client for looking at and tampering with
// the keys behind the lock's back.
func rawClient(t testing.TB, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	return c
}

func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// counting wraps a lock.Redis and counts the scripts it runs, for tests that
// check how many round trips something costs, and can fail calls on demand.
// It also records the shape of each call by SHA ("<keys>/<args>": a
// NOSCRIPT's resend by source is the same call), for take.
type counting struct {
	lock.Redis
	evals atomic.Int64
	fail  atomic.Bool

	mu     sync.Mutex
	shapes []string
}

func (c *counting) record(keys, args []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.shapes = append(c.shapes, fmt.Sprintf("%d/%d", len(keys), len(args)))
}

// take returns the shapes of the calls made since the last take.
func (c *counting) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.shapes
	c.shapes = nil
	return s
}

func (c *counting) EvalSHA(ctx context.Context, sha string, keys, args []string) (int64, error) {
	c.evals.Add(1)
	c.record(keys, args)
	if c.fail.Load() {
		return 0, errInjected
	}
	return c.Redis.EvalSHA(ctx, sha, keys, args)
}

func (c *counting) Eval(ctx context.Context, src string, keys, args []string) (int64, error) {
	c.evals.Add(1)
	if c.fail.Load() {
		return 0, errInjected
	}
	return c.Redis.Eval(ctx, src, keys, args)
}

func (c *counting) EvalSHAStrings(ctx context.Context, sha string, keys, args []string) ([]string, error) {
	c.evals.Add(1)
	c.record(keys, args)
	if c.fail.Load() {
		return nil, errInjected
	}
	return c.Redis.EvalSHAStrings(ctx, sha, keys, args)
}

func (c *counting) EvalStrings(ctx context.Context, src string, keys, args []string) ([]string, error) {
	c.evals.Add(1)
	if c.fail.Load() {
		return nil, errInjected
	}
	return c.Redis.EvalStrings(ctx, src, keys, args)
}

type injected struct{}

func (injected) Error() string { return "injected failure" }

var errInjected error = injected{}

// renewals records what the Renew hook sees: when each renewal started
// and ended, and how.
type renewals struct {
	mu   sync.Mutex
	done []renewal
}

type renewal struct {
	start, end time.Time
	err        error
}

func (r *renewals) hook(_ string, took time.Duration, err error) {
	now := time.Now()
	r.mu.Lock()
	r.done = append(r.done, renewal{start: now.Add(-took), end: now, err: err})
	r.mu.Unlock()
}

func (r *renewals) list() []renewal {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.done)
}

// waitFor polls cond until it holds or d passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitInLine waits until n waiters are in the line of the lock name.
func waitInLine(t testing.TB, c *lock.Client, name string, n int) {
	t.Helper()
	waitFor(t, 5*time.Second, fmt.Sprintf("%d waiters in line for %s", n, name), func() bool {
		st, err := c.Inspect(context.Background(), name)
		return err == nil && st.Waiters == n
	})
}

// checkGoroutines fails the test if, once it and its cleanups are done, more
// goroutines run than before it started (clients' own goroutines included).
func checkGoroutines(t *testing.T) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for {
			n := runtime.NumGoroutine()
			if n <= before {
				return
			}
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				buf = buf[:runtime.Stack(buf, true)]
				t.Errorf("goroutine leak: %d before, %d after\n%s", before, n, buf)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

const sigStop, sigCont = syscall.SIGSTOP, syscall.SIGCONT

// acquired is the outcome of a Lock call made in another goroutine.
type acquired struct {
	l   *lock.Lock
	err error
}

// lockAsync runs take in a goroutine and delivers its outcome on the
// channel it returns. The goroutine neither blocks (the channel is
// buffered) nor touches t: a test that already failed and ended cannot be
// reported to afterwards, which would panic and hide the first failure.
func lockAsync(take func() (*lock.Lock, error)) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		l, err := take()
		ch <- acquired{l, err}
	}()
	return ch
}

// turn is a waiter's outcome as the line tests record it, in the order
// the waiters got the lock: who took it, or the error that kept it from it.
type turn struct {
	who string
	err error
}

// must returns the lock, or fails the test with the error.
func (a acquired) must(t testing.TB) *lock.Lock {
	t.Helper()
	if a.err != nil {
		t.Fatal(a.err)
	}
	return a.l
}
