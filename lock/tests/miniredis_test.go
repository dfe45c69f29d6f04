package tests

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill/lock"
	"github.com/seckilldev/seckill/lock/goredis"
)

// TestMiniredis runs the lock's scripts on miniredis, the Redis of
// seckill's embedded demo (gopher-lua instead of Redis's Lua): every kind
// of lock, the waiting line with handoffs between two clients, inspection
// and a forced unlock. miniredis does not expire keys by itself, so leases
// are not tested here.
func TestMiniredis(t *testing.T) {
	m := miniredis.RunT(t)
	dial := func() *lock.Client {
		rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { rdb.Close() })
		return newClient(t, goredis.New(rdb), "mini:")
	}
	c1, c2 := dial(), dial()
	ctx := ctxTimeout(t, 30*time.Second)

	// a mutex: exclusion and handoffs between the two clients' waiters
	ex := &exclusion{t: t}
	var wg sync.WaitGroup
	for i := range 6 {
		c := []*lock.Client{c1, c2}[i%2]
		wg.Go(func() {
			for range 5 {
				l, err := c.Lock(ctx, "m", lock.WithRetry(lock.LinearBackoff(5*time.Second)))
				if err != nil {
					t.Error(err)
					return
				}
				ex.enter(l)
				time.Sleep(time.Millisecond)
				ex.exit()
				if err := l.Unlock(ctx); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if ex.entries != 30 {
		t.Errorf("%d acquisitions, want 30", ex.entries)
	}

	// reentrant with metadata; Extend of one hold; inspection
	job := lock.WithReentrant("job")
	outer, err := c1.TryLock(ctx, "re", job, lock.WithMetadata("outer"))
	if err != nil {
		t.Fatal(err)
	}
	inner, err := c2.TryLock(ctx, "re", job)
	if err != nil {
		t.Fatal(err)
	}
	if err := inner.Extend(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	if st, err := c2.Inspect(ctx, "re"); err != nil || len(st.Holds) != 2 || st.Holds[0].Owner != "job" {
		t.Errorf("Inspect: %+v, %v", st, err)
	}
	inner.Unlock(ctx)
	outer.Unlock(ctx)

	// a semaphore and a read-write lock
	sem := c1.Semaphore("s", 2)
	p1, err1 := sem.TryAcquire(ctx)
	p2, err2 := sem.TryAcquire(ctx)
	if err1 != nil || err2 != nil || p1.Slot() == p2.Slot() {
		t.Fatalf("permits: %v, %v", err1, err2)
	}
	if _, err := sem.TryAcquire(ctx); !errors.Is(err, lock.ErrNotObtained) {
		t.Errorf("third permit: %v", err)
	}
	p1.Unlock(ctx)
	p2.Unlock(ctx)
	rw := c2.RWLock("rw")
	r1, err1 := rw.TryRLock(ctx)
	r2, err2 := rw.TryRLock(ctx)
	if err1 != nil || err2 != nil {
		t.Fatalf("read holds: %v, %v", err1, err2)
	}
	if _, err := rw.TryLock(ctx); !errors.Is(err, lock.ErrNotObtained) {
		t.Errorf("write hold with readers: %v", err)
	}
	r1.Unlock(ctx)
	r2.Unlock(ctx)

	// a forced unlock gives the lock to the waiter
	held, err := c1.TryLock(ctx, "f")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error)
	go func() {
		l, err := c2.Lock(ctx, "f", lock.WithRetry(lock.LinearBackoff(5*time.Second)))
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	waitInLine(t, c1, "f", 1)
	removed, err := c1.ForceUnlock(ctx, "f")
	if err != nil || len(removed.Holds) != 1 || removed.Holds[0].Token != held.Token() {
		t.Errorf("ForceUnlock: %+v, %v", removed, err)
	}
	if err := <-got; err != nil {
		t.Error(err)
	}
}
