package tests

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seckilldev/seckill/lock"
)

// TestInspect looks at locks one does not hold: who holds them, with which
// token, lease and metadata, and who waits.
func TestInspect(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		ctx := ctxTimeout(t, 20*time.Second)
		c := newClient(t, r, prefix)
		other := newClient(t, r, prefix) // looks from another client

		if st, err := other.Inspect(ctx, "free"); err != nil || st.Locked() || st.Kind != "" {
			t.Errorf("free lock: %+v, %v", st, err)
		}
		if held, err := other.IsLocked(ctx, "free"); err != nil || held {
			t.Errorf("IsLocked(free) = %v, %v", held, err)
		}

		plain, err := c.TryLock(ctx, "plain", lock.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		st, err := other.Inspect(ctx, "plain")
		if err != nil {
			t.Fatal(err)
		}
		if st.Kind != lock.KindMutex || len(st.Holds) != 1 || st.Holds[0].Token != plain.Token() ||
			st.Holds[0].TTL <= 0 || st.Holds[0].TTL > 10*time.Second || st.TTL != st.Holds[0].TTL {
			t.Errorf("plain: %+v", st)
		}
		if held, err := other.IsLocked(ctx, "plain"); err != nil || !held {
			t.Errorf("IsLocked(plain) = %v, %v", held, err)
		}

		job := lock.WithReentrant("job-9")
		outer, err := c.TryLock(ctx, "meta", job, lock.WithMetadata("host-a pid 42"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.TryLock(ctx, "meta", job, lock.WithTTL(5*time.Second)); err != nil {
			t.Fatal(err)
		}
		st, err = other.Inspect(ctx, "meta")
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Holds) != 2 || st.Holds[0].Owner != "job-9" || st.Holds[0].Token != outer.Token() ||
			st.Holds[1].Token != outer.Token() || st.TTL < 20*time.Second {
			t.Errorf("reentrant: %+v", st)
		}
		mds := map[string]bool{st.Holds[0].Metadata: true, st.Holds[1].Metadata: true}
		if !mds["host-a pid 42"] {
			t.Errorf("metadata not found: %+v", st.Holds)
		}

		rw := c.RWLock("rwi")
		r1, _ := rw.TryRLock(ctx)
		r2, _ := rw.TryRLock(ctx)
		st, err = other.Inspect(ctx, "rwi")
		if err != nil || st.Kind != lock.KindRWLock || len(st.Holds) != 2 || st.Holds[0].Mode != "read" ||
			st.Holds[0].Token != r1.Token() || st.Holds[1].Token != r2.Token() {
			t.Errorf("rwlock: %+v, %v", st, err)
		}

		sem := c.Semaphore("semi", 5)
		p, _ := sem.TryAcquire(ctx)
		st, err = other.Inspect(ctx, "semi")
		if err != nil || st.Kind != lock.KindSemaphore || st.Permits != 5 || len(st.Holds) != 1 || st.Holds[0].Slot != p.Slot() {
			t.Errorf("semaphore: %+v, %v", st, err)
		}
		for _, l := range []*lock.Lock{plain, outer, r1, r2, p} {
			l.Unlock(ctx)
		}
	})
}

// TestForceUnlock: an administrator removes a lock someone holds; the call
// returns what it removed, the next waiter gets the lock, and the old
// holder learns at its next renewal that it lost it.
func TestForceUnlock(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		ctx := ctxTimeout(t, 20*time.Second)
		c := newClient(t, r, prefix)
		admin := newClient(t, r, prefix)
		held, err := c.Lock(ctx, "stuck", lock.WithWatchdog(time.Second), lock.WithMetadata("job 7"))
		if err != nil {
			t.Fatal(err)
		}
		got := lockAsync(func() (*lock.Lock, error) {
			return c.Lock(ctx, "stuck", lock.WithRetry(lock.LinearBackoff(10*time.Second)))
		})
		waitInLine(t, admin, "stuck", 1)
		removed, err := admin.ForceUnlock(ctx, "stuck")
		if err != nil {
			t.Fatal(err)
		}
		if len(removed.Holds) != 1 || removed.Holds[0].Token != held.Token() || removed.Holds[0].Metadata != "job 7" {
			t.Errorf("removed %+v, want the hold of token %d", removed, held.Token())
		}
		var next *lock.Lock
		select {
		case a := <-got:
			next = a.must(t)
		case <-time.After(5 * time.Second):
			t.Fatal("the waiter did not get the lock")
		}
		if next.Token() <= held.Token() {
			t.Errorf("token %d after %d", next.Token(), held.Token())
		}
		select {
		case <-held.Done():
		case <-time.After(3 * time.Second):
			t.Fatal("the old holder did not learn that its lock was removed")
		}
		if cause := context.Cause(held.Context()); !errors.Is(cause, lock.ErrLost) {
			t.Errorf("cause %v, want ErrLost", cause)
		}
		next.Unlock(ctx)
		if removed, err := admin.ForceUnlock(ctx, "stuck"); err != nil || removed.Locked() {
			t.Errorf("ForceUnlock of a free lock: %+v, %v", removed, err)
		}
	})
}
