package tests

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/lock"
	"github.com/seckilldev/seckill/lock/goredis"
	"github.com/seckilldev/seckill/lock/rueidislock"
)

// TestCluster runs the lock on a 3-master Redis Cluster with both clients:
// names spread over all masters, contention with waiters woken through
// cluster pub/sub, handoffs, reentrant and metadata locks, and names that
// bring their own hash tag. A script touching keys of two slots would fail
// with CROSSSLOT.
func TestCluster(t *testing.T) {
	dials, raw := startCluster(t)
	for name, dial := range dials {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := ctxTimeout(t, 60*time.Second)
			prefix := name + ":"
			c1 := newClient(t, dial(), prefix)
			c2 := newClient(t, dial(), prefix)

			// names on every master
			masters := map[string]bool{}
			for i := range 30 {
				n := "n" + strconv.Itoa(i)
				l, err := c1.TryLock(ctx, n)
				if err != nil {
					t.Fatal(err)
				}
				key := prefix + "{" + n + "}"
				if a, b := raw.ClusterKeySlot(ctx, key).Val(), raw.ClusterKeySlot(ctx, key+":fence").Val(); a != b {
					t.Errorf("%s: slots %d and %d", n, a, b)
				}
				if err := raw.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
					if m.Exists(ctx, key).Val() == 1 {
						masters[m.Options().Addr] = true
					}
					return nil
				}); err != nil {
					t.Fatal(err)
				}
				if _, err := c2.TryLock(ctx, n); !errors.Is(err, lock.ErrNotObtained) {
					t.Errorf("%s taken twice: %v", n, err)
				}
				if err := l.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if len(masters) != 3 {
				t.Errorf("locks landed on %d masters, want 3", len(masters))
			}

			// contention from two clients: handoffs within one, pub/sub
			// wake-ups across
			ex := &exclusion{t: t}
			var wg sync.WaitGroup
			for _, c := range []*lock.Client{c1, c2} {
				for range 5 {
					wg.Go(func() {
						for range 10 {
							l, err := c.Lock(ctx, "hot:{x}", lock.WithRetry(lock.LinearBackoff(5*time.Second)))
							if err != nil {
								t.Error(err)
								return
							}
							ex.enter(l)
							time.Sleep(time.Millisecond)
							ex.exit()
							l.Unlock(ctx)
						}
					})
				}
			}
			wg.Wait()

			// reentrant and metadata locks
			me := lock.WithReentrant("job-1")
			a, err := c1.TryLock(ctx, "re", me, lock.WithMetadata("m"))
			if err != nil {
				t.Fatal(err)
			}
			b, err := c2.TryLock(ctx, "re", me)
			if err != nil {
				t.Fatalf("reentry from another client of the same owner: %v", err)
			}
			a.Unlock(ctx)
			if _, err := c1.TryLock(ctx, "re"); !errors.Is(err, lock.ErrNotObtained) {
				t.Errorf("free with a hold left: %v", err)
			}
			b.Unlock(ctx)

			// a watchdog on a cluster keeps the lock past its lease
			const lease = 2 * time.Second
			w, err := c1.Lock(ctx, "dog", lock.WithWatchdog(lease))
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(lease + lease/2)
			select {
			case <-w.Done():
				t.Fatalf("lost: %v", context.Cause(w.Context()))
			default:
			}
			w.Unlock(ctx)
		})
	}
}

// startCluster starts a 3-master Redis Cluster for the test and returns a
// dial per adapter (each call a new client, closed at the end of the test)
// and a plain client for looking at the keys.
func startCluster(t *testing.T) (map[string]func() lock.Redis, *redis.ClusterClient) {
	nodes := testenv.StartCluster(t, 3)
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.Addr)
	}
	dials := map[string]func() lock.Redis{
		"goredis": func() lock.Redis {
			c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
			t.Cleanup(func() { c.Close() })
			return goredis.New(c)
		},
		"rueidis": func() lock.Redis {
			c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			return rueidislock.New(c)
		},
	}
	raw := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { raw.Close() })
	return dials, raw
}
