package tests

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/lock"
	"github.com/seckilldev/seckill/lock/goredis"
)

// TestNestedHoldNeverShortens is the regression test of a safety bug: a
// nested reentrant hold with a shorter lease (an Extend, or a watchdog's
// renewals) set the lease of the whole key, so another owner took the lock
// while the outer hold, with 10 s of its fixed lease left, still believed it
// held it. Each hold now has its own expiry, and the key lives as long as
// the longest.
func TestNestedHoldNeverShortens(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		c := newClient(t, r, prefix)
		ctx := ctxTimeout(t, 20*time.Second)
		for _, how := range []string{"extend", "watchdog"} {
			t.Run(how, func(t *testing.T) {
				name := "nest-" + how
				me := lock.WithReentrant("job")
				outer, err := c.TryLock(ctx, name, me, lock.WithTTL(10*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				defer outer.Unlock(ctx)
				if how == "extend" {
					inner, err := c.TryLock(ctx, name, me, lock.WithTTL(10*time.Second))
					if err != nil {
						t.Fatal(err)
					}
					if err := inner.Extend(ctx, 200*time.Millisecond); err != nil {
						t.Fatal(err)
					}
				} else {
					// renewed to 300 ms every 100 ms, then released
					inner, err := c.TryLock(ctx, name, me, lock.WithWatchdog(300*time.Millisecond))
					if err != nil {
						t.Fatal(err)
					}
					time.Sleep(200 * time.Millisecond)
					if err := inner.Unlock(ctx); err != nil {
						t.Fatal(err)
					}
				}
				time.Sleep(500 * time.Millisecond) // past the inner lease
				valid := outer.ValidUntil()
				other, err := c.TryLock(ctx, name, lock.WithReentrant("other"))
				switch {
				case err == nil:
					defer other.Unlock(ctx)
					if time.Now().Before(valid) {
						t.Errorf("another owner took the lock while the outer hold is valid for %v more", time.Until(valid))
					}
				case !errors.Is(err, lock.ErrNotObtained):
					t.Fatal(err)
				}
				if ttl, err := outer.TTL(ctx); err != nil || ttl < 8*time.Second {
					t.Errorf("outer hold's TTL %v, %v: want its own 10 s lease", ttl, err)
				}
			})
		}
	})
}

// TestExtendUnderWatchdog: Extend under a watchdog sets the watchdog's
// lease. A longer one is not undone by the next renewal; a shorter one is
// renewed often enough, not lost. The leases leave a loaded 2-core machine
// under -race its stalls (a 300 ms lease was lost there between two
// renewals, and a 1.5 s one kept no renewal answered for a second).
func TestExtendUnderWatchdog(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		c := newClient(t, r, prefix)
		ctx := ctxTimeout(t, 20*time.Second)
		const lease = 1500 * time.Millisecond

		long, err := c.Lock(ctx, "ext-long", lock.WithWatchdog(lease))
		if err != nil {
			t.Fatal(err)
		}
		if err := long.Extend(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
		time.Sleep(lease) // a renewal of the old lease would come after lease/3
		if ttl, err := long.TTL(ctx); err != nil || ttl < 50*time.Second {
			t.Errorf("TTL %v, %v after Extend(1m): the renewal undid the extension", ttl, err)
		}
		long.Unlock(ctx)

		const shorter = 3 * time.Second
		short, err := c.Lock(ctx, "ext-short", lock.WithWatchdog(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if err := short.Extend(ctx, shorter); err != nil {
			t.Fatal(err)
		}
		time.Sleep(shorter * 3 / 2) // kept only by renewals of the shorter lease
		select {
		case <-short.Done():
			t.Fatalf("lost after Extend(%v) under a watchdog: %v", shorter, context.Cause(short.Context()))
		default:
		}
		if ttl, err := short.TTL(ctx); err != nil || ttl > shorter {
			t.Errorf("TTL %v, %v: want the %v lease, renewed", ttl, err, shorter)
		}
		if err := short.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// slowExtend delays the extend script's calls (one key, two arguments)
// by delay before they are sent and again after the answer: a round trip
// of 2*delay, as Redis or the machine answers when loaded.
type slowExtend struct {
	lock.Redis
	delay time.Duration
}

func isExtend(keys, args []string) bool { return len(keys) == 1 && len(args) == 2 }

func (s slowExtend) EvalSHA(ctx context.Context, sha string, keys, args []string) (int64, error) {
	if !isExtend(keys, args) {
		return s.Redis.EvalSHA(ctx, sha, keys, args)
	}
	time.Sleep(s.delay)
	v, err := s.Redis.EvalSHA(ctx, sha, keys, args)
	time.Sleep(s.delay)
	return v, err
}

func (s slowExtend) Eval(ctx context.Context, src string, keys, args []string) (int64, error) {
	if !isExtend(keys, args) {
		return s.Redis.Eval(ctx, src, keys, args)
	}
	time.Sleep(s.delay)
	v, err := s.Redis.Eval(ctx, src, keys, args)
	time.Sleep(s.delay)
	return v, err
}

// TestWatchdogSlowRenewals: the watchdog renews every third of the lease
// counted from each renewal's start, so renewals whose round trip is more
// than a third of the lease (here 0.36 of it) keep the lock. Counted from
// each answer, as it was, the period was a third plus the round trip: the
// second renewal's answer came after the first one's validity had ended,
// and the lock was declared lost 8 s in (4 s with a 3 s lease), with every
// renewal succeeding. The lease leaves a stall of 1.6 s.
func TestWatchdogSlowRenewals(t *testing.T) {
	t.Parallel()
	const lease = 6 * time.Second
	var rec renewals
	c := newClient(t, slowExtend{Redis: dialRueidis(t, testenv.RedisAddr(t)), delay: lease * 18 / 100},
		testenv.Prefix(t)+":", lock.WithHooks(lock.Hooks{Renew: rec.hook}))
	ctx := ctxTimeout(t, 30*time.Second)
	l, err := c.Lock(ctx, "slow-renewals", lock.WithWatchdog(lease))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	select {
	case <-l.Done():
		t.Errorf("lost with renewals of %v round trips: %v", 2*lease*18/100, context.Cause(l.Context()))
	case <-time.After(lease * 3 / 2):
	}
	done := rec.list()
	for _, r := range done {
		if r.err != nil {
			t.Errorf("a renewal failed: %v", r.err)
		}
	}
	if len(done) < 2 {
		t.Errorf("%d renewals in 1.5 leases, want 2 or more", len(done))
	}
}

// TestOptionConflict: WithTTL and WithWatchdog both set the lease; given
// both, the acquisition fails instead of one silently winning.
func TestOptionConflict(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		c := newClient(t, r, prefix)
		ctx := ctxTimeout(t, 10*time.Second)
		for _, opts := range [][]lock.LockOption{
			{lock.WithTTL(time.Second), lock.WithWatchdog(time.Second)},
			{lock.WithWatchdog(time.Second), lock.WithTTL(time.Second)},
		} {
			if _, err := c.TryLock(ctx, "opt", opts...); !errors.Is(err, lock.ErrOption) {
				t.Errorf("TryLock: %v, want ErrOption", err)
			}
			if _, err := c.Lock(ctx, "opt", opts...); !errors.Is(err, lock.ErrOption) {
				t.Errorf("Lock: %v, want ErrOption", err)
			}
		}
		l, err := c.TryLock(ctx, "opt", lock.WithTTL(time.Second), lock.WithTTL(2*time.Second))
		if err != nil {
			t.Fatalf("the same option twice: %v", err)
		}
		l.Unlock(ctx)
	})
}

// hanging is a Redis whose scripts hang until their context ends, as with a
// client that honours deadlines and a server that does not answer.
type hanging struct {
	lock.Redis
	hang chan struct{} // closed: hang
}

func (h *hanging) EvalSHA(ctx context.Context, sha string, keys, args []string) (int64, error) {
	select {
	case <-h.hang:
		<-ctx.Done()
		return 0, ctx.Err()
	default:
	}
	return h.Redis.EvalSHA(ctx, sha, keys, args)
}

func (h *hanging) EvalSHAStrings(ctx context.Context, sha string, keys, args []string) ([]string, error) {
	select {
	case <-h.hang:
		<-ctx.Done()
		return nil, ctx.Err()
	default:
	}
	return h.Redis.EvalSHAStrings(ctx, sha, keys, args)
}

// TestContextEndsDuringAttempt: when ctx ends while an attempt is under
// way, the error matches ErrNotObtained as well as the context's error (it
// was a bare DeadlineExceeded).
func TestContextEndsDuringAttempt(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		ctx := ctxTimeout(t, 20*time.Second)
		holder := newClient(t, r, prefix)
		held, err := holder.TryLock(ctx, "inflight")
		if err != nil {
			t.Fatal(err)
		}
		defer held.Unlock(ctx)

		h := &hanging{Redis: r, hang: make(chan struct{})}
		c := newClient(t, h, prefix)
		close(h.hang)
		for _, call := range []string{"TryLock", "Lock"} {
			wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			var err error
			if call == "TryLock" {
				_, err = c.TryLock(wctx, "inflight")
			} else {
				_, err = c.Lock(wctx, "inflight")
			}
			cancel()
			if !errors.Is(err, lock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s: %v, want ErrNotObtained and DeadlineExceeded", call, err)
			}
		}

		// and while a waiter polls: its first attempt finds the lock taken,
		// the polls hang
		h2 := &hanging{Redis: r, hang: make(chan struct{})}
		c2 := newClient(t, h2, prefix)
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		errs := make(chan error, 1)
		go func() {
			_, err := c2.Lock(wctx, "inflight", lock.WithRetry(lock.LinearBackoff(20*time.Millisecond)))
			errs <- err
		}()
		time.Sleep(50 * time.Millisecond)
		close(h2.hang)
		if err := <-errs; !errors.Is(err, lock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Lock with a poll under way: %v, want ErrNotObtained and DeadlineExceeded", err)
		}
	})
}

// TestRedlockHungNode: one of five nodes hangs (SIGSTOP) and the go-redis
// clients do not honour context deadlines (no ContextTimeoutEnabled): their
// read timeout, 30 s, is longer than the lease. Redlock does not wait for
// the node once a quorum has answered, so TryLock, Extend, TTL and Unlock
// succeed with the other four at their speed; TryLock used to wait for the
// hung node and fail, the validity elapsed, and then each operation waited
// for it for the per-node timeout.
func TestRedlockHungNode(t *testing.T) {
	var nodes []lock.Redis
	var servers []*testenv.RedisServer
	for range 5 {
		s := testenv.StartRedis(t)
		servers = append(servers, s)
		c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, ReadTimeout: 30 * time.Second})
		t.Cleanup(func() { c.Close() })
		nodes = append(nodes, goredis.New(c))
	}
	c := lock.NewRedlock(nodes, lock.WithPrefix("hung:"))
	t.Cleanup(func() { c.Close() })
	ctx := ctxTimeout(t, 30*time.Second)
	// the clients' connections exist before the node hangs
	l, err := c.TryLock(ctx, "warm", lock.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	l.Unlock(ctx)

	if err := servers[4].Signal(sigStop); err != nil {
		t.Fatal(err)
	}
	defer servers[4].Signal(sigCont)
	// An operation ends once a quorum has answered: the hung node costs
	// nothing. A 30 s lease awaits a node for 10 s (a third of it); ten
	// rounds of four operations used to wait for the hung node 1 s each
	// (a tenth of the lease, 1 s at most), 40 s in all.
	const lease = 30 * time.Second
	start := time.Now()
	for i := range 10 {
		l, err := c.TryLock(ctx, "x", lock.WithTTL(lease))
		if err != nil {
			t.Fatalf("attempt %d with 4 of 5 nodes up: %v", i, err)
		}
		// a quorum of tokens, none from the hung node (a node that answered
		// after the quorum has none either)
		if tok := l.Tokens(); tok[4] != 0 || countNonZero(tok) < 3 {
			t.Errorf("tokens %v, want 3 or 4, none from the hung node", tok)
		}
		if err := l.Extend(ctx, lease); err != nil {
			t.Errorf("Extend with 4 of 5 nodes up: %v", err)
		}
		if ttl, err := l.TTL(ctx); err != nil || ttl < lease/2 {
			t.Errorf("TTL with 4 of 5 nodes up: %v, %v", ttl, err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Errorf("Unlock with 4 of 5 nodes up: %v", err)
		}
	}
	if took := time.Since(start); took > lease/3 {
		t.Errorf("40 operations with a hung node took %v: they waited for it", took)
	}
}

func countNonZero(v []int64) int {
	n := 0
	for _, x := range v {
		if x != 0 {
			n++
		}
	}
	return n
}
