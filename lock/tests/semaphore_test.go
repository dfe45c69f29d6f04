package tests

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/lock"
)

// slots checks a semaphore instead of trusting it: at most permits holders
// at once, each in a slot no other holder has, and each slot's tokens
// growing (fencing per permit).
type slots struct {
	t       testing.TB
	permits int
	mu      sync.Mutex
	held    map[int]bool
	last    map[int]int64
	most    int
	entries int
}

func newSlots(t testing.TB, permits int) *slots {
	return &slots{t: t, permits: permits, held: map[int]bool{}, last: map[int]int64{}}
}

func (s *slots) enter(p *lock.Lock) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.Slot() < 0 || p.Slot() >= s.permits {
		s.t.Errorf("slot %d of %d permits", p.Slot(), s.permits)
	}
	if s.held[p.Slot()] {
		s.t.Errorf("slot %d held twice", p.Slot())
	}
	if p.Token() <= s.last[p.Slot()] {
		s.t.Errorf("slot %d: token %d not above %d", p.Slot(), p.Token(), s.last[p.Slot()])
	}
	s.held[p.Slot()], s.last[p.Slot()] = true, p.Token()
	if n := len(s.held); n > s.most {
		s.most = n
	}
	s.entries++
}

func (s *slots) exit(p *lock.Lock) {
	s.mu.Lock()
	delete(s.held, p.Slot())
	s.mu.Unlock()
}

// TestSemaphore: 12 goroutines of two clients share 3 permits: never more
// than 3 holders, all 3 used, slots exclusive, tokens growing per slot.
func TestSemaphore(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		ctx := ctxTimeout(t, 60*time.Second)
		clients := []*lock.Client{newClient(t, r, prefix), newClient(t, a.dial(t, testenv.RedisAddr(t)), prefix)}
		const permits = 3
		s := newSlots(t, permits)
		var wg sync.WaitGroup
		for i := range 12 {
			sem := clients[i%2].Semaphore("sem", permits)
			wg.Go(func() {
				for range 10 {
					p, err := sem.Acquire(ctx, lock.WithRetry(lock.LinearBackoff(10*time.Second)))
					if err != nil {
						t.Error(err)
						return
					}
					s.enter(p)
					time.Sleep(2 * time.Millisecond)
					s.exit(p)
					if err := p.Unlock(ctx); err != nil {
						t.Error(err)
					}
				}
			})
		}
		wg.Wait()
		if s.entries != 120 || s.most != permits {
			t.Errorf("%d acquisitions, at most %d holders at once; want 120 and %d", s.entries, s.most, permits)
		}
	})
}

// TestSemaphorePermits: TryAcquire fails once the permits are taken;
// another number of permits, reentrancy and Redlock are refused; a permit
// whose lease ran out frees its slot, and its holder learns it.
func TestSemaphorePermits(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		ctx := ctxTimeout(t, 20*time.Second)
		c := newClient(t, r, prefix)
		sem := c.Semaphore("p", 2)
		p0, err := sem.TryAcquire(ctx, lock.WithTTL(500*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		p1, err := sem.TryAcquire(ctx, lock.WithMetadata("second"))
		if err != nil {
			t.Fatal(err)
		}
		if p0.Slot() == p1.Slot() || p1.Token() <= p0.Token() {
			t.Errorf("slots %d, %d; tokens %d, %d", p0.Slot(), p1.Slot(), p0.Token(), p1.Token())
		}
		if _, err := sem.TryAcquire(ctx); !errors.Is(err, lock.ErrNotObtained) {
			t.Errorf("third permit of 2: %v, want ErrNotObtained", err)
		}
		if _, err := c.Semaphore("p", 3).TryAcquire(ctx); !errors.Is(err, lock.ErrKind) || !errors.Is(err, lock.ErrNotObtained) {
			t.Errorf("other permits: %v, want ErrKind", err)
		}
		if _, err := c.TryLock(ctx, "p"); !errors.Is(err, lock.ErrKind) {
			t.Errorf("a mutex on a semaphore's name: %v, want ErrKind", err)
		}
		if _, err := sem.TryAcquire(ctx, lock.WithReentrant("x")); !errors.Is(err, lock.ErrOption) {
			t.Errorf("reentrant permit: %v, want ErrOption", err)
		}
		if _, err := c.Semaphore("p", 0).TryAcquire(ctx); !errors.Is(err, lock.ErrOption) {
			t.Errorf("0 permits: %v, want ErrOption", err)
		}
		rl := lock.NewRedlock([]lock.Redis{r, r, r}, lock.WithPrefix(prefix))
		defer rl.Close()
		if _, err := rl.Semaphore("p", 2).TryAcquire(ctx); !errors.Is(err, lock.ErrOption) {
			t.Errorf("Redlock semaphore: %v, want ErrOption", err)
		}

		// p0's lease runs out: its slot is free again, p0 knows it
		<-p0.Done()
		if cause := context.Cause(p0.Context()); !errors.Is(cause, lock.ErrLost) {
			t.Errorf("cause %v, want ErrLost", cause)
		}
		var p2 *lock.Lock
		waitFor(t, 5*time.Second, "the expired permit's slot", func() bool {
			p2, err = sem.TryAcquire(ctx)
			return err == nil
		})
		if p2.Slot() != p0.Slot() || p2.Token() <= p1.Token() {
			t.Errorf("slot %d token %d after the expiry of slot %d", p2.Slot(), p2.Token(), p0.Slot())
		}
		if err := p0.Unlock(ctx); !errors.Is(err, lock.ErrNotHeld) {
			t.Errorf("Unlock of the expired permit: %v, want ErrNotHeld", err)
		}
		// the watchdog renews a permit; Extend of one leaves the other alone
		if err := p1.Extend(ctx, 200*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if ttl, err := p2.TTL(ctx); err != nil || ttl < 20*time.Second {
			t.Errorf("the other permit's TTL %v, %v after an Extend of this one", ttl, err)
		}
		p1.Unlock(ctx)
		p2.Unlock(ctx)
		if st, err := c.Inspect(ctx, "p"); err != nil || st.Locked() {
			t.Errorf("after every release: %+v, %v", st, err)
		}
	})
}

// TestSemaphoreWatchdog: a permit outlives its lease while its watchdog
// runs. The lease is long enough for a loaded 2-core machine under -race:
// with 300 ms, the process stalled for 150 ms before a renewal, whose round
// trip then took 260 ms, and the permit expired between two renewals (the
// watchdog reported it lost, as it must); with 1.5 s, a renewal went
// unanswered for a second once in 40 runs.
func TestSemaphoreWatchdog(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		ctx := ctxTimeout(t, 20*time.Second)
		c := newClient(t, r, prefix)
		const lease = 3 * time.Second
		var renewals atomic.Int32
		cw := newClient(t, r, prefix, lock.WithHooks(lock.Hooks{Renew: func(_ string, _ time.Duration, err error) {
			if err == nil {
				renewals.Add(1)
			}
		}}))
		p, err := cw.Semaphore("dog", 1).Acquire(ctx, lock.WithWatchdog(lease))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(lease * 3 / 2)
		if _, err := c.Semaphore("dog", 1).TryAcquire(ctx); !errors.Is(err, lock.ErrNotObtained) {
			t.Errorf("the permit was not kept: %v (%v)", err, context.Cause(p.Context()))
		}
		if renewals.Load() < 3 {
			t.Errorf("%d renewals in 1.5 leases", renewals.Load())
		}
		if err := p.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
