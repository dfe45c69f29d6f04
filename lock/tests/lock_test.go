package tests

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/lock"
)

// exclusion checks mutual exclusion instead of assuming it: every holder
// counts itself in and out, and hands in its fencing token, which must be
// larger than every token handed in before.
type exclusion struct {
	t       testing.TB
	holders atomic.Int32
	mu      sync.Mutex
	last    int64
	entries int
}

func (e *exclusion) enter(l *lock.Lock) {
	if n := e.holders.Add(1); n != 1 {
		e.t.Errorf("%d holders of %s at once", n, l.Key())
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if l.Token() <= e.last {
		e.t.Errorf("token %d of a new holder is not above the last one, %d", l.Token(), e.last)
	}
	e.last = l.Token()
	e.entries++
}

func (e *exclusion) exit() { e.holders.Add(-1) }

// TestMutualExclusion: 100 goroutines on one key; at any time exactly one
// holds it. Two witnesses: an in-process counter of holders, and a
// read-modify-write of a Redis counter inside the critical section, which
// loses updates if two sections overlap.
func TestMutualExclusion(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		addr := testenv.RedisAddr(t)
		c := newClient(t, r, prefix)
		raw := rawClient(t, addr)
		ctx := ctxTimeout(t, 60*time.Second)
		counter := prefix + "counter"
		ex := &exclusion{t: t}
		const goroutines, rounds = 100, 3
		var wg sync.WaitGroup
		for range goroutines {
			wg.Go(func() {
				for range rounds {
					l, err := c.Lock(ctx, "hot", lock.WithTTL(10*time.Second))
					if err != nil {
						t.Error(err)
						return
					}
					ex.enter(l)
					v, _ := raw.Get(ctx, counter).Int()
					if err := raw.Set(ctx, counter, v+1, time.Minute).Err(); err != nil {
						t.Error(err)
					}
					ex.exit()
					if err := l.Unlock(ctx); err != nil {
						t.Error(err)
					}
				}
			})
		}
		wg.Wait()
		got, _ := raw.Get(ctx, counter).Int()
		if want := goroutines * rounds; got != want || ex.entries != want {
			t.Errorf("counter %d, entries %d, want %d", got, ex.entries, want)
		}
	})
}

// TestTryLockOneWinner: of 100 goroutines trying at once, exactly one wins.
func TestTryLockOneWinner(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		c := newClient(t, r, prefix)
		ctx := ctxTimeout(t, 20*time.Second)
		var won, lost atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range 100 {
			wg.Go(func() {
				<-start
				_, err := c.TryLock(ctx, "once")
				switch {
				case err == nil:
					won.Add(1)
				case errors.Is(err, lock.ErrNotObtained):
					lost.Add(1)
				default:
					t.Error(err)
				}
			})
		}
		close(start)
		wg.Wait()
		if won.Load() != 1 || lost.Load() != 99 {
			t.Errorf("won %d, lost %d; want 1 and 99", won.Load(), lost.Load())
		}
	})
}

// TestExpiry: a fixed lease runs out; another takes the lock; the first
// holder's context ends with ErrLost; its Unlock says ErrNotHeld and does
// not release the new holder's lock.
func TestExpiry(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		c := newClient(t, r, prefix)
		ctx := ctxTimeout(t, 20*time.Second)
		const lease = time.Second
		l, err := c.TryLock(ctx, "exp", lock.WithTTL(lease))
		if err != nil {
			t.Fatal(err)
		}
		ttl, err := l.TTL(ctx)
		if err != nil || ttl <= 0 || ttl > lease {
			t.Fatalf("TTL = %v, %v; want (0, %v]", ttl, err, lease)
		}
		if _, err := c.TryLock(ctx, "exp"); !errors.Is(err, lock.ErrNotObtained) {
			t.Fatalf("TryLock while held: %v, want ErrNotObtained", err)
		}
		select {
		case <-l.Done():
		case <-time.After(lease + 2*time.Second):
			t.Fatal("context not cancelled at the end of the lease")
		}
		if cause := context.Cause(l.Context()); !errors.Is(cause, lock.ErrLost) {
			t.Errorf("cause %v, want ErrLost", cause)
		}
		var l2 *lock.Lock
		waitFor(t, 5*time.Second, "the lease to expire in Redis", func() bool {
			l2, err = c.TryLock(ctx, "exp")
			return err == nil
		})
		if err := l.Unlock(ctx); !errors.Is(err, lock.ErrNotHeld) {
			t.Errorf("Unlock of an expired lock: %v, want ErrNotHeld", err)
		}
		if _, err := l.TTL(ctx); !errors.Is(err, lock.ErrNotHeld) {
			t.Errorf("TTL of an expired lock: %v, want ErrNotHeld", err)
		}
		if err := l.Extend(ctx, time.Second); !errors.Is(err, lock.ErrNotHeld) {
			t.Errorf("Extend of an expired lock: %v, want ErrNotHeld", err)
		}
		if _, err := c.TryLock(ctx, "exp"); !errors.Is(err, lock.ErrNotObtained) {
			t.Errorf("the stale Unlock released the new holder's lock: %v", err)
		}
		if l2.Token() <= l.Token() {
			t.Errorf("tokens %d then %d: not increasing", l.Token(), l2.Token())
		}
		if err := l2.Unlock(ctx); err != nil {
			t.Error(err)
		}
	})
}

// TestExtend moves the end of a fixed lease.
func TestExtend(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		c := newClient(t, r, prefix)
		ctx := ctxTimeout(t, 20*time.Second)
		const lease = time.Second
		l, err := c.TryLock(ctx, "ext", lock.WithTTL(lease))
		if err != nil {
			t.Fatal(err)
		}
		for range 4 {
			time.Sleep(lease / 2) // four times: twice the lease in all
			if err := l.Extend(ctx, lease); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case <-l.Done():
			t.Fatalf("lost although extended: %v", context.Cause(l.Context()))
		default:
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// TestWatchdog: without a fixed lease the lock renews itself every third of
// the lease and outlives three leases; after Unlock no renewal starts and
// the key is gone.
func TestWatchdog(t *testing.T) {
	checkGoroutines(t)
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		cr := &counting{Redis: r}
		rs := &renewals{}
		c := newClient(t, cr, prefix, lock.WithHooks(lock.Hooks{Renew: rs.hook}))
		raw := rawClient(t, testenv.RedisAddr(t))
		ctx := ctxTimeout(t, 20*time.Second)
		const lease = 1200 * time.Millisecond
		l, err := c.Lock(ctx, "dog", lock.WithWatchdog(lease))
		if err != nil {
			t.Fatal(err)
		}
		firstValid := l.ValidUntil()
		if until := time.Until(firstValid); until <= 0 || until > lease {
			t.Errorf("ValidUntil in %v, want within the lease", until)
		}
		deadline := time.Now().Add(3 * lease)
		for time.Now().Before(deadline) {
			if _, err := c.TryLock(ctx, "dog"); !errors.Is(err, lock.ErrNotObtained) {
				t.Fatalf("taken by another while the watchdog runs: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		// The next renewal is due a third of the lease after the previous
		// one started, when the lease it renewed began (sooner after a
		// failure; at once if the previous one took longer). The gaps
		// between the renewals' starts show that period; the median ignores
		// the odd late timer.
		held := rs.list()
		if len(held) < 6 {
			t.Fatalf("%d renewals in 3 leases, want about 9", len(held))
		}
		var gaps []time.Duration
		for i := 1; i < len(held); i++ {
			if err := held[i-1].err; err != nil {
				t.Logf("renewal %d failed: %v", i-1, err)
				continue
			}
			gap := held[i].start.Sub(held[i-1].start)
			if gap < lease/3-5*time.Millisecond {
				t.Errorf("renewal %d came %v after the previous one, before a third of the lease", i, gap)
			}
			gaps = append(gaps, gap)
		}
		if len(gaps) < 3 {
			t.Fatalf("%d of %d renewals succeeded", len(gaps), len(held))
		}
		slices.Sort(gaps)
		if med := gaps[len(gaps)/2]; med > lease/3+lease/8 {
			t.Errorf("median gap between renewals %v, want about a third of the lease (%v); all: %v", med, lease/3, gaps)
		}
		select {
		case <-l.Done():
			t.Fatalf("lost: %v", context.Cause(l.Context()))
		default:
		}
		if !l.ValidUntil().After(firstValid.Add(2 * lease)) {
			t.Errorf("ValidUntil %v did not move with the renewals (first %v)", l.ValidUntil(), firstValid)
		}
		unlocking := time.Now()
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		unlocked, evals := time.Now(), cr.evals.Load()
		if !l.ValidUntil().IsZero() {
			t.Error("ValidUntil not zero after Unlock")
		}
		time.Sleep(2 * lease)
		// A renewal under way when Unlock was called may end after it, and
		// send its script (which finds the lock gone); none may start
		// after it.
		var late []renewal
		for _, rn := range rs.list() {
			if rn.end.After(unlocking) {
				late = append(late, rn)
			}
			if rn.start.After(unlocked) {
				t.Errorf("a renewal started %v after Unlock returned", rn.start.Sub(unlocked))
			}
		}
		if n := cr.evals.Load() - evals; len(late) > 1 || n > int64(len(late)) {
			t.Errorf("renewals went on after Unlock: %d renewals ended after it was called, %d scripts ran after it returned", len(late), n)
		}
		if n, _ := raw.Exists(ctx, prefix+"{dog}").Result(); n != 0 {
			t.Error("the key is still there after Unlock")
		}
		if context.Cause(l.Context()) != context.Canceled {
			t.Errorf("cause after Unlock %v, want context.Canceled", context.Cause(l.Context()))
		}
	})
}

// TestLostSignal: the context of a held lock ends, with cause ErrLost, when
// the key is deleted or taken over behind its back.
func TestLostSignal(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		var lostHook atomic.Int32
		c := newClient(t, r, prefix, lock.WithHooks(lock.Hooks{
			Lost: func(string, error) { lostHook.Add(1) },
		}))
		raw := rawClient(t, testenv.RedisAddr(t))
		ctx := ctxTimeout(t, 20*time.Second)
		const lease = time.Second // the refusal comes at the next renewal, after a third of it
		for _, how := range []string{"deleted", "taken over"} {
			t.Run(how, func(t *testing.T) {
				name := "lost-" + how
				l, err := c.Lock(ctx, name, lock.WithWatchdog(lease))
				if err != nil {
					t.Fatal(err)
				}
				raw.Del(ctx, prefix+"{"+name+"}")
				if how == "taken over" {
					if _, err := c.TryLock(ctx, name); err != nil {
						t.Fatal(err)
					}
				}
				start := time.Now()
				select {
				case <-l.Done():
				case <-time.After(2 * lease):
					t.Fatal("no lost signal within two leases")
				}
				t.Logf("lost signal after %v", time.Since(start).Round(time.Millisecond))
				if cause := context.Cause(l.Context()); !errors.Is(cause, lock.ErrLost) {
					t.Errorf("cause %v, want ErrLost", cause)
				}
				if !l.ValidUntil().IsZero() {
					t.Error("ValidUntil not zero after the loss")
				}
				if err := l.Unlock(ctx); !errors.Is(err, lock.ErrNotHeld) {
					t.Errorf("Unlock of a lost lock: %v, want ErrNotHeld", err)
				}
			})
		}
		// the hook is called right after the context ends, not before
		waitFor(t, 5*time.Second, "the Lost hook", func() bool { return lostHook.Load() >= 2 })
		if n := lostHook.Load(); n != 2 {
			t.Errorf("Lost hook called %d times, want 2", n)
		}
	})
}

// TestLostWhenUnreachable: a stopped Redis (SIGSTOP: requests hang, like a
// partition) makes the lock lost when the lease runs out, even though the
// renewal is still waiting for an answer.
func TestLostWhenUnreachable(t *testing.T) {
	for _, a := range adapters {
		t.Run(a.name, func(t *testing.T) {
			t.Parallel()
			srv := testenv.StartRedis(t)
			c := newClient(t, a.dial(t, srv.Addr), "u:")
			ctx := ctxTimeout(t, 20*time.Second)
			const lease = time.Second
			l, err := c.Lock(ctx, "far", lock.WithWatchdog(lease))
			if err != nil {
				t.Fatal(err)
			}
			if err := srv.Signal(sigStop); err != nil {
				t.Fatal(err)
			}
			defer srv.Signal(sigCont)
			start := time.Now()
			select {
			case <-l.Done():
			case <-time.After(3 * lease):
				t.Fatal("no lost signal while Redis is unreachable")
			}
			waited := time.Since(start)
			t.Logf("lost after %v: %v", waited.Round(time.Millisecond), context.Cause(l.Context()))
			// The renewal under way hangs for go-redis' read timeout (3 s):
			// a signal well before that came from the lease timer.
			if waited > lease+lease/2 {
				t.Errorf("lost signal after %v, later than the lease (%v)", waited, lease)
			}
			if cause := context.Cause(l.Context()); !errors.Is(cause, lock.ErrLost) {
				t.Errorf("cause %v, want ErrLost", cause)
			}
		})
	}
}

// TestFencing: tokens strictly increase across holders, whether the lock
// was free, handed over to a waiter, or its counter was lost.
func TestFencing(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		c := newClient(t, r, prefix)
		raw := rawClient(t, testenv.RedisAddr(t))
		ctx := ctxTimeout(t, 20*time.Second)
		var last int64
		check := func(l *lock.Lock, how string) {
			t.Helper()
			if l.Token() <= last {
				t.Errorf("%s: token %d not above %d", how, l.Token(), last)
			}
			last = l.Token()
		}
		for i := range 20 {
			l, err := c.TryLock(ctx, "fence")
			if err != nil {
				t.Fatal(err)
			}
			check(l, "free")
			if i%5 == 4 {
				// the counter expired, was evicted, or a failover lost it
				raw.Del(ctx, prefix+"{fence}:fence")
			}
			l.Unlock(ctx)
		}
		// through handoffs
		holder, err := c.TryLock(ctx, "fence")
		if err != nil {
			t.Fatal(err)
		}
		check(holder, "free")
		got := make(chan acquired, 5) // never blocks a waiter, which never touches t
		for range 5 {
			go func() {
				l, err := c.Lock(ctx, "fence")
				got <- acquired{l, err}
			}()
		}
		time.Sleep(100 * time.Millisecond)
		for range 5 {
			holder.Unlock(ctx)
			holder = (<-got).must(t)
			check(holder, "handed over")
		}
		holder.Unlock(ctx)
		if ttl := raw.PTTL(ctx, prefix+"{fence}:fence").Val(); ttl <= 0 || ttl > time.Second {
			t.Errorf("fence counter TTL %v, want at most a second: counters must not pile up", ttl)
		}
	})
}

// TestReentrant: the same owner takes the lock again; the lock is free once
// every hold is released; others cannot take it meanwhile; tokens are shared.
func TestReentrant(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		c := newClient(t, r, prefix)
		raw := rawClient(t, testenv.RedisAddr(t))
		ctx := ctxTimeout(t, 20*time.Second)
		me := lock.WithReentrant("order-42")
		outer, err := c.TryLock(ctx, "re", me, lock.WithMetadata("outer"))
		if err != nil {
			t.Fatal(err)
		}
		inner, err := c.TryLock(ctx, "re", me)
		if err != nil {
			t.Fatalf("reentry: %v", err)
		}
		if inner.Token() != outer.Token() {
			t.Errorf("reentry token %d, want the outer %d", inner.Token(), outer.Token())
		}
		third, err := c.TryLock(ctx, "re", me)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.TryLock(ctx, "re", lock.WithReentrant("someone-else")); !errors.Is(err, lock.ErrNotObtained) {
			t.Errorf("another owner: %v, want ErrNotObtained", err)
		}
		if _, err := c.TryLock(ctx, "re"); !errors.Is(err, lock.ErrNotObtained) {
			t.Errorf("a plain lock: %v, want ErrNotObtained", err)
		}
		st, err := c.Inspect(ctx, "re")
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Holds) != 3 || st.Kind != lock.KindMutex || st.Holds[0].Owner != "order-42" {
			t.Errorf("Inspect: %+v, want 3 holds of owner order-42", st)
		}
		if md := raw.HGet(ctx, prefix+"{re}", "m").Val(); md != "outer" {
			t.Errorf("metadata %q", md)
		}
		for i, l := range []*lock.Lock{inner, outer} {
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if err := l.Unlock(ctx); !errors.Is(err, lock.ErrNotHeld) {
				t.Errorf("second Unlock of the same hold: %v", err)
			}
			if _, err := c.TryLock(ctx, "re"); !errors.Is(err, lock.ErrNotObtained) {
				t.Errorf("free after %d of 3 releases: %v", i+1, err)
			}
		}
		if err := third.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		l, err := c.TryLock(ctx, "re")
		if err != nil {
			t.Fatalf("not free after every hold was released: %v", err)
		}
		l.Unlock(ctx)
	})
}

// TestReleaseNotHeld: releasing a lock one no longer holds returns
// ErrNotHeld, never a transport error and never "taken", and a retried
// release leaves the next holder alone.
func TestReleaseNotHeld(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		c := newClient(t, r, prefix)
		raw := rawClient(t, testenv.RedisAddr(t))
		ctx := ctxTimeout(t, 20*time.Second)
		l, err := c.TryLock(ctx, "rel")
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		next, err := c.TryLock(ctx, "rel")
		if err != nil {
			t.Fatal(err)
		}
		err = l.Unlock(ctx)
		if !errors.Is(err, lock.ErrNotHeld) || errors.Is(err, lock.ErrNotObtained) {
			t.Errorf("retried Unlock: %v, want ErrNotHeld", err)
		}
		if n, _ := raw.Exists(ctx, prefix+"{rel}").Result(); n != 1 {
			t.Error("a retried Unlock released the next holder's lock")
		}
		// a lost reply: the release ran, the caller saw an error and retries
		cr := &counting{Redis: r}
		c2 := newClient(t, cr, prefix)
		l2, err := c2.TryLock(ctx, "rel2")
		if err != nil {
			t.Fatal(err)
		}
		raw.Del(ctx, prefix+"{rel2}") // as if the first Unlock ran...
		cr.fail.Store(true)           // ...and its reply was lost
		if err := l2.Unlock(ctx); !errors.Is(err, errInjected) {
			t.Fatalf("Unlock: %v", err)
		}
		cr.fail.Store(false)
		if err := l2.Unlock(ctx); !errors.Is(err, lock.ErrNotHeld) {
			t.Errorf("retried Unlock after a lost reply: %v, want ErrNotHeld", err)
		}
		next.Unlock(ctx)
	})
}

// TestLockTimeout: a Lock whose context ends returns an error that matches
// both ErrNotObtained and the context's error.
func TestLockTimeout(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		cr := &counting{Redis: r}
		c := newClient(t, cr, prefix)
		ctx := ctxTimeout(t, 20*time.Second)
		held, err := c.TryLock(ctx, "busy")
		if err != nil {
			t.Fatal(err)
		}
		defer held.Unlock(ctx)
		start := time.Now() // before the deadline is set: it cannot come earlier
		wctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
		defer cancel()
		_, err = c.Lock(wctx, "busy")
		if !errors.Is(err, lock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v, want ErrNotObtained and DeadlineExceeded", err)
		}
		if d := time.Since(start); d < 150*time.Millisecond || d > 2*time.Second {
			t.Errorf("returned after %v", d)
		}
		// a retry strategy that gives up
		_, err = c.Lock(ctx, "busy", lock.WithRetry(lock.LimitRetry(lock.LinearBackoff(10*time.Millisecond), 3)))
		if !errors.Is(err, lock.ErrNotObtained) || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("LimitRetry: %v, want plain ErrNotObtained", err)
		}
		// TryLock does not wait: one attempt, one script
		evals := cr.evals.Load()
		if _, err := c.TryLock(ctx, "busy"); !errors.Is(err, lock.ErrNotObtained) {
			t.Errorf("TryLock: %v", err)
		}
		if n := cr.evals.Load() - evals; n != 1 {
			t.Errorf("TryLock ran %d scripts, want 1", n)
		}
	})
}

// TestWokenByRelease: a waiter gets the lock as soon as it is released,
// with a fallback poll of 10 s: the wake-up came from the release, and the
// waiter ran only a couple of scripts.
func TestWokenByRelease(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		ctx := ctxTimeout(t, 20*time.Second)
		taken := make(chan string, 16) // names of attempts that found the lock taken
		hooks := lock.WithHooks(lock.Hooks{Attempt: func(name string, _ time.Duration, err error) {
			if errors.Is(err, lock.ErrNotObtained) {
				select {
				case taken <- name:
				default:
				}
			}
		}})
		holderClient := newClient(t, r, prefix, hooks)
		for _, where := range []string{"same client", "other client"} {
			t.Run(where, func(t *testing.T) {
				cr := &counting{Redis: r}
				waiterClient := holderClient
				if where == "other client" {
					waiterClient = newClient(t, cr, prefix, hooks)
				}
				name := "wake-" + where
				held, err := holderClient.TryLock(ctx, name)
				if err != nil {
					t.Fatal(err)
				}
				got := make(chan time.Time, 1)
				failed := make(chan error, 1)
				go func() {
					l, err := waiterClient.Lock(ctx, name, lock.WithRetry(lock.LinearBackoff(10*time.Second)))
					if err != nil {
						failed <- err // reported by the test, not after it
						return
					}
					got <- time.Now()
					l.Unlock(ctx)
				}()
				// release only once the waiter found the lock taken: then
				// nothing but the release can get it there within 10 s
				timeout := time.After(10 * time.Second)
				for found := false; !found; {
					select {
					case n := <-taken:
						found = n == name
					case err := <-failed:
						t.Fatalf("the waiter failed: %v", err)
					case <-timeout:
						t.Fatal("the waiter made no attempt")
					}
				}
				released := time.Now()
				if err := held.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
				select {
				case at := <-got:
					t.Logf("woken %v after the release", at.Sub(released).Round(time.Microsecond))
				case err := <-failed:
					t.Fatalf("the waiter failed: %v", err)
				case <-time.After(2 * time.Second):
					t.Fatal("the waiter was not woken by the release")
				}
				if where == "other client" {
					if n := cr.evals.Load(); n > 4 {
						t.Errorf("the waiter ran %d scripts; it should not poll", n)
					}
				}
			})
		}
	})
}

// TestRemoteWaitersNotStarved: two clients hammer one lock; the handoff
// between waiters of one client must not starve the other client.
func TestRemoteWaitersNotStarved(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		ctx := ctxTimeout(t, 30*time.Second)
		clients := []*lock.Client{newClient(t, r, prefix), newClient(t, a.dial(t, testenv.RedisAddr(t)), prefix)}
		ex := &exclusion{t: t}
		// A number of acquisitions, not a duration, so that a loaded
		// machine makes the test slower, not the shares smaller.
		const total = 200
		var per [2]atomic.Int32
		var all atomic.Int32
		var wg sync.WaitGroup
		for i, c := range clients {
			for range 8 {
				wg.Go(func() {
					for all.Load() < total {
						l, err := c.Lock(ctx, "shared")
						if err != nil {
							t.Error(err)
							return
						}
						ex.enter(l)
						time.Sleep(time.Millisecond)
						ex.exit()
						per[i].Add(1)
						all.Add(1)
						l.Unlock(ctx)
					}
				})
			}
		}
		wg.Wait()
		a0, a1 := per[0].Load(), per[1].Load()
		t.Logf("acquisitions: client 0 %d, client 1 %d", a0, a1)
		if n := a0 + a1; n < total || a0 < n/10 || a1 < n/10 {
			t.Errorf("a client starved: %d and %d acquisitions, want a tenth of %d or more each", a0, a1, n)
		}
	})
}

// TestUndoUnknownOutcome: when the reply of an acquisition is lost, the
// client releases it in the background instead of leaving it taken for a
// whole lease.
func TestUndoUnknownOutcome(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		ctx := ctxTimeout(t, 20*time.Second)
		lr := &lostReply{Redis: r}
		c := newClient(t, lr, prefix)
		lr.lose.Store(true)
		if _, err := c.TryLock(ctx, "undo"); !errors.Is(err, errInjected) {
			t.Fatalf("TryLock: %v", err)
		}
		lr.lose.Store(false)
		other := newClient(t, r, prefix)
		waitFor(t, 5*time.Second, "the lock to be released", func() bool {
			l, err := other.TryLock(ctx, "undo")
			if err == nil {
				l.Unlock(ctx)
			}
			return err == nil
		})
	})
}

// lostReply runs every script but, while lose is set, reports an error.
type lostReply struct {
	lock.Redis
	lose atomic.Bool
}

func (r *lostReply) EvalSHA(ctx context.Context, sha string, keys, args []string) (int64, error) {
	v, err := r.Redis.EvalSHA(ctx, sha, keys, args)
	if r.lose.Load() {
		return 0, errInjected
	}
	return v, err
}

// TestClose: Close ends waiting Lock calls with ErrClosed, ends the
// contexts of held locks with cause ErrClosed, stops the watchdogs and
// leaves no goroutine behind; Unlock still works.
func TestClose(t *testing.T) {
	checkGoroutines(t)
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		ctx := ctxTimeout(t, 20*time.Second)
		c := lock.New(r, lock.WithPrefix(prefix))
		held, err := c.Lock(ctx, "c", lock.WithWatchdog(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		errs := make(chan error)
		for range 3 {
			go func() {
				_, err := c.Lock(ctx, "c")
				errs <- err
			}()
		}
		time.Sleep(100 * time.Millisecond)
		c.Close()
		for range 3 {
			if err := <-errs; !errors.Is(err, lock.ErrClosed) {
				t.Errorf("waiter: %v, want ErrClosed", err)
			}
		}
		<-held.Done()
		if cause := context.Cause(held.Context()); !errors.Is(cause, lock.ErrClosed) {
			t.Errorf("cause %v, want ErrClosed", cause)
		}
		if _, err := c.TryLock(ctx, "x"); !errors.Is(err, lock.ErrClosed) {
			t.Errorf("TryLock after Close: %v", err)
		}
		if err := held.Unlock(ctx); err != nil {
			t.Errorf("Unlock after Close: %v", err)
		}
	})
}

// TestHooks counts the events a contended lock produces.
func TestHooks(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		var attempts, taken, acquires, releases atomic.Int32
		waiting := make(chan struct{}, 1)
		c := newClient(t, r, prefix, lock.WithHooks(lock.Hooks{
			Attempt: func(_ string, _ time.Duration, err error) {
				attempts.Add(1)
				if errors.Is(err, lock.ErrNotObtained) {
					taken.Add(1)
					select {
					case waiting <- struct{}{}:
					default:
					}
				}
			},
			Acquire: func(string, time.Duration, error) { acquires.Add(1) },
			Release: func(string, time.Duration, error) { releases.Add(1) },
		}))
		ctx := ctxTimeout(t, 20*time.Second)
		l, err := c.TryLock(ctx, "h")
		if err != nil {
			t.Fatal(err)
		}
		unlocked := make(chan struct{})
		go func() {
			defer close(unlocked)
			<-waiting // the Lock below found it taken
			l.Unlock(ctx)
		}()
		l2, err := c.Lock(ctx, "h")
		if err != nil {
			t.Fatal(err)
		}
		l2.Unlock(ctx)
		<-unlocked
		if attempts.Load() < 2 || taken.Load() < 1 || acquires.Load() != 2 || releases.Load() != 2 {
			t.Errorf("attempts %d, taken %d, acquires %d, releases %d", attempts.Load(), taken.Load(), acquires.Load(), releases.Load())
		}
	})
}

// TestNoScript: after SCRIPT FLUSH (a restart, a failover) the scripts are
// sent again.
func TestNoScript(t *testing.T) {
	for _, a := range adapters {
		t.Run(a.name, func(t *testing.T) {
			t.Parallel()
			srv := testenv.StartRedis(t)
			c := newClient(t, a.dial(t, srv.Addr), "n:")
			raw := rawClient(t, srv.Addr)
			ctx := ctxTimeout(t, 20*time.Second)
			for range 3 {
				raw.ScriptFlush(ctx)
				l, err := c.TryLock(ctx, "k")
				if err != nil {
					t.Fatal(err)
				}
				raw.ScriptFlush(ctx)
				if err := l.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestKeys: all keys of one lock share a hash slot: a name's own hash tag is
// kept, any other name becomes the tag.
func TestKeys(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		c := newClient(t, r, prefix)
		raw := rawClient(t, testenv.RedisAddr(t))
		ctx := ctxTimeout(t, 20*time.Second)
		for name, key := range map[string]string{
			"order:7":          prefix + "{order:7}",
			"stock:{a42}:lock": prefix + "stock:{a42}:lock",
			"{}odd":            prefix + "{{}odd}",
		} {
			l, err := c.TryLock(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			if n := raw.Exists(ctx, key, key+":fence").Val(); n != 2 {
				t.Errorf("name %q: keys %s and its :fence exist %d times, want 2", name, key, n)
			}
			if l.Key() != name {
				t.Errorf("Key() = %q, want %q", l.Key(), name)
			}
			l.Unlock(ctx)
		}
	})
}

// TestManyNames: locks of many names from many goroutines.
func TestManyNames(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		c := newClient(t, r, prefix)
		ctx := ctxTimeout(t, 20*time.Second)
		var wg sync.WaitGroup
		for g := range 16 {
			wg.Go(func() {
				for i := range 50 {
					l, err := c.Lock(ctx, "n"+strconv.Itoa(g*1000+i%7))
					if err != nil {
						t.Error(err)
						return
					}
					if err := l.Unlock(ctx); err != nil {
						t.Error(fmt.Errorf("%s: %w", l.Key(), err))
					}
				}
			})
		}
		wg.Wait()
	})
}
