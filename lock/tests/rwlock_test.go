package tests

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/lock"
)

// TestRWLock: readers and writers of two clients. Never a writer with
// anyone else; readers together; write tokens growing, and every read
// token above the last write's.
func TestRWLock(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		ctx := ctxTimeout(t, 60*time.Second)
		clients := []*lock.Client{newClient(t, r, prefix), newClient(t, a.dial(t, testenv.RedisAddr(t)), prefix)}
		var readers, writers, mostReaders atomic.Int32
		var mu sync.Mutex
		var lastWrite int64
		var wg sync.WaitGroup
		for i := range 12 {
			rw := clients[i%2].RWLock("rw")
			write := i%4 == 0
			wg.Go(func() {
				for range 10 {
					var l *lock.Lock
					var err error
					retry := lock.WithRetry(lock.LinearBackoff(10 * time.Second))
					if write {
						l, err = rw.Lock(ctx, retry)
					} else {
						l, err = rw.RLock(ctx, retry)
					}
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					if l.Token() <= lastWrite {
						t.Errorf("token %d not above the last write's %d", l.Token(), lastWrite)
					}
					if write {
						lastWrite = l.Token()
					}
					mu.Unlock()
					if write {
						if n := writers.Add(1); n != 1 || readers.Load() != 0 {
							t.Errorf("a writer with %d writers and %d readers", n, readers.Load())
						}
					} else {
						n := readers.Add(1)
						if writers.Load() != 0 {
							t.Errorf("a reader with a writer")
						}
						for m := mostReaders.Load(); n > m && !mostReaders.CompareAndSwap(m, n); m = mostReaders.Load() {
						}
					}
					time.Sleep(2 * time.Millisecond)
					if write {
						writers.Add(-1)
					} else {
						readers.Add(-1)
					}
					if err := l.Unlock(ctx); err != nil {
						t.Error(err)
					}
				}
			})
		}
		wg.Wait()
		t.Logf("at most %d readers at once", mostReaders.Load())
		if mostReaders.Load() < 2 {
			t.Errorf("readers never shared the lock")
		}
	})
}

// TestRWLockFair: a writer that waits is not overtaken by readers that come
// after it, and the readers behind it get the lock together when it
// releases.
func TestRWLockFair(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		ctx := ctxTimeout(t, 20*time.Second)
		c := newClient(t, r, prefix)
		rw := c.RWLock("fair")
		r1, err := rw.TryRLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rw.TryLock(ctx); !errors.Is(err, lock.ErrNotObtained) {
			t.Fatalf("write hold with a reader: %v", err)
		}
		wrote := lockAsync(func() (*lock.Lock, error) { return rw.Lock(ctx) })
		waitInLine(t, c, "fair", 1)
		if _, err := rw.TryRLock(ctx); !errors.Is(err, lock.ErrNotObtained) {
			t.Errorf("a reader overtook a waiting writer: %v", err)
		}
		var reads []<-chan acquired
		for range 3 {
			reads = append(reads, lockAsync(func() (*lock.Lock, error) { return rw.RLock(ctx) }))
		}
		waitInLine(t, c, "fair", 4)
		r1.Unlock(ctx)
		w := (<-wrote).must(t)
		if st, _ := c.Inspect(ctx, "fair"); len(st.Holds) != 1 || st.Holds[0].Mode != "write" {
			t.Errorf("after the reader: %+v, want the writer alone", st)
		}
		w.Unlock(ctx)
		var rs []*lock.Lock
		for _, read := range reads {
			rs = append(rs, (<-read).must(t))
		}
		if st, _ := c.Inspect(ctx, "fair"); len(st.Holds) != 3 {
			t.Errorf("after the writer: %+v, want the 3 readers together", st)
		}
		for _, l := range rs {
			l.Unlock(ctx)
		}
	})
}
