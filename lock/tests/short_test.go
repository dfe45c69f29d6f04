package tests

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/lock"
)

// TestShortCalls: the uncontended TryLock and its Unlock send only what
// the uncontended case reads (3 keys and 2 arguments, then 1 and 1), and
// every other case they meet is answered by the full call that follows,
// as before: a lock taken, a free lock with a waiter in line (which gets
// it), a hold marked by a waiter (handed to it), a name of another kind.
func TestShortCalls(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		ctx := ctxTimeout(t, 20*time.Second)
		rec := &counting{Redis: r}
		c := newClient(t, rec, prefix)
		other := newClient(t, a.dial(t, testenv.RedisAddr(t)), prefix)
		check := func(what string, want ...string) {
			t.Helper()
			if got := rec.take(); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s: calls (keys/args) %v, want %v", what, got, want)
			}
		}

		// uncontended: one short call each way
		l, err := c.TryLock(ctx, "free")
		if err != nil {
			t.Fatal(err)
		}
		check("TryLock of a free lock", "3/2")
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		check("Unlock of a hold nobody waits for", "1/1")

		// taken by another plain hold: the short call answers
		held, err := other.TryLock(ctx, "taken")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.TryLock(ctx, "taken"); !errors.Is(err, lock.ErrNotObtained) {
			t.Fatalf("TryLock of a taken lock: %v, want ErrNotObtained", err)
		}
		check("TryLock of a taken lock", "3/2")

		// a waiter joins the line of a short hold: the short release finds
		// the mark and the full one hands the lock over
		l, err = c.TryLock(ctx, "marked")
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan *lock.Lock, 1)
		go func() {
			w, err := other.Lock(ctx, "marked", lock.WithRetry(lock.LinearBackoff(10*time.Second)))
			if err != nil {
				t.Error(err)
			}
			got <- w
		}()
		waitInLine(t, other, "marked", 1)
		rec.take()
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		check("Unlock of a hold a waiter marked", "1/1", "4/4")
		st, err := other.Inspect(ctx, "marked")
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Holds) != 1 || st.Holds[0].Token <= l.Token() {
			t.Fatalf("right after the release the lock is %+v, want held by the waiter", st)
		}
		if w := <-got; w != nil {
			w.Unlock(ctx)
		}

		// a free lock with a waiter in line (its holder died: its key is
		// deleted here): the full call gives it to the waiter, not to
		// TryLock. The waiter's own poll, every few seconds, may take it
		// first (then the short call finds it taken): tried again on
		// another name.
		raw := rawClient(t, testenv.RedisAddr(t))
		for i := 0; ; i++ {
			name := fmt.Sprintf("expired-%d", i)
			if _, err := other.TryLock(ctx, name, lock.WithTTL(time.Minute)); err != nil {
				t.Fatal(err)
			}
			go func() {
				w, err := other.Lock(ctx, name, lock.WithRetry(lock.LinearBackoff(time.Minute)))
				if err != nil {
					t.Error(err)
				}
				got <- w
			}()
			waitInLine(t, other, name, 1)
			if err := raw.Del(ctx, prefix+"{"+name+"}").Err(); err != nil {
				t.Fatal(err)
			}
			rec.take()
			if _, err := c.TryLock(ctx, name); !errors.Is(err, lock.ErrNotObtained) {
				t.Fatalf("TryLock of a free lock with a waiter: %v, want ErrNotObtained", err)
			}
			calls := rec.take()
			select {
			case w := <-got:
				if w != nil {
					w.Unlock(ctx)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the waiter did not get the free lock")
			}
			if fmt.Sprint(calls) == "[3/2]" && i < 5 {
				continue // the waiter's poll came first
			}
			if want := "[3/2 4/7]"; fmt.Sprint(calls) != want {
				t.Errorf("TryLock of a free lock with a waiter: calls (keys/args) %v, want %v", calls, want)
			}
			break
		}

		// another kind of lock: the full call tells
		sem, err := other.Semaphore("kind", 2).TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rec.take()
		if _, err := c.TryLock(ctx, "kind"); !errors.Is(err, lock.ErrKind) {
			t.Fatalf("TryLock of a semaphore's name: %v, want ErrKind", err)
		}
		check("TryLock of a semaphore's name", "3/2", "4/7")
		sem.Unlock(ctx)
		held.Unlock(ctx)
	})
}
