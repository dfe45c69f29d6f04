package tests

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckilldev/seckill/lock"
)

// TestFastPathOptions: what the options' documentation says of the fast
// path (see lock.LockOption). Goroutines of one client contend for a plain
// mutex: with the defaults, or a lease of WithWatchdog, they form a cohort
// and most holds are passed on without Redis (fewer scripts than
// acquisitions); WithTTL, WithMetadata, WithRetry (even the default
// strategy) and WithReentrant each wait in the Redis line, and every
// acquisition costs a script at least.
func TestFastPathOptions(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		ctx := ctxTimeout(t, 60*time.Second)
		cases := []struct {
			name string
			opts func(g int) []lock.LockOption
			fast bool
		}{
			{"defaults", func(int) []lock.LockOption { return nil }, true},
			{"WithWatchdog", func(int) []lock.LockOption { return []lock.LockOption{lock.WithWatchdog(20 * time.Second)} }, true},
			{"WithTTL", func(int) []lock.LockOption { return []lock.LockOption{lock.WithTTL(20 * time.Second)} }, false},
			{"WithMetadata", func(int) []lock.LockOption { return []lock.LockOption{lock.WithMetadata("m")} }, false},
			{"WithRetry", func(int) []lock.LockOption { return []lock.LockOption{lock.WithRetry(lock.DefaultRetry())} }, false},
			{"WithReentrant", func(g int) []lock.LockOption {
				return []lock.LockOption{lock.WithReentrant([]string{"a", "b", "c", "d", "e", "f"}[g])}
			}, false},
		}
		for _, tc := range cases {
			cr := &counting{Redis: r}
			c := newClient(t, cr, prefix)
			name := "fast-" + tc.name
			const g, each = 6, 20
			var inside atomic.Int32
			var wg sync.WaitGroup
			for i := range g {
				wg.Go(func() {
					for range each {
						l, err := c.Lock(ctx, name, tc.opts(i)...)
						if err != nil {
							t.Error(err)
							return
						}
						if n := inside.Add(1); n != 1 {
							t.Errorf("%s: %d holders at once", tc.name, n)
						}
						time.Sleep(200 * time.Microsecond)
						inside.Add(-1)
						if err := l.Unlock(ctx); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			n := cr.evals.Load()
			t.Logf("%s: %d scripts for %d acquisitions", tc.name, n, g*each)
			if tc.fast && n >= g*each {
				t.Errorf("%s: %d scripts for %d acquisitions: not passed on in-process", tc.name, n, g*each)
			}
			if !tc.fast && n < g*each {
				t.Errorf("%s: %d scripts for %d acquisitions: passed on in-process, which the documentation denies", tc.name, n, g*each)
			}
		}
	})
}

// TestReentrantOwnerIsShared: what WithReentrant's documentation warns of.
// The owner string is all it takes: another client (another process) that
// presents it while the owner holds the lock gets in at once, beside the
// holder and with its fencing token; another owner, or none, waits.
func TestReentrantOwnerIsShared(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		ctx := ctxTimeout(t, 20*time.Second)
		holder, stranger := newClient(t, r, prefix), newClient(t, r, prefix)
		l, err := holder.Lock(ctx, "owner", lock.WithReentrant("job-7"))
		if err != nil {
			t.Fatal(err)
		}
		in, err := stranger.TryLock(ctx, "owner", lock.WithReentrant("job-7"))
		if err != nil {
			t.Fatalf("another client with the owner's string: %v, want in at once", err)
		}
		if in.Token() != l.Token() {
			t.Errorf("tokens %d and %d, want one shared token", in.Token(), l.Token())
		}
		if _, err := stranger.TryLock(ctx, "owner", lock.WithReentrant("job-8")); !errors.Is(err, lock.ErrNotObtained) {
			t.Errorf("another owner: %v, want ErrNotObtained", err)
		}
		if _, err := stranger.TryLock(ctx, "owner"); !errors.Is(err, lock.ErrNotObtained) {
			t.Errorf("no owner: %v, want ErrNotObtained", err)
		}
		if st, err := holder.Inspect(ctx, "owner"); err != nil || len(st.Holds) != 2 {
			t.Errorf("Inspect: %+v, %v, want the two holds of job-7", st, err)
		}
		in.Unlock(ctx)
		l.Unlock(ctx)
	})
}
