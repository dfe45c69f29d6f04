package lock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/lock"
	"github.com/seckilldev/seckill/lock/goredis"
	rueidislock "github.com/seckilldev/seckill/lock/rueidis"
)

// redlockDial makes one node's lock.Redis with a client that honours
// context deadlines, which Redlock's per-node timeouts rely on.
var redlockDial = map[string]func(t testing.TB, addr string) lock.Redis{
	"goredis": func(t testing.TB, addr string) lock.Redis {
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond,
			ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		return goredis.New(c)
	},
	"rueidis": func(t testing.TB, addr string) lock.Redis {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableRetry: true,
			ConnWriteTimeout: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return rueidislock.New(c)
	},
}

// vectorFence is the resource side of Redlock fencing (see Lock.Tokens): it
// keeps the largest token seen per node and refuses a write carrying a
// token below one of them.
type vectorFence struct {
	mu   sync.Mutex
	seen []int64
}

func (f *vectorFence) accept(tokens []int64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.seen == nil {
		f.seen = make([]int64, len(tokens))
	}
	for i, tok := range tokens {
		if tok != 0 && tok < f.seen[i] {
			return false
		}
	}
	for i, tok := range tokens {
		f.seen[i] = max(f.seen[i], tok)
	}
	return true
}

// TestRedlock runs five redis-server processes, contends for one lock from
// ten goroutines, kills one node halfway, and checks that exclusion holds,
// progress continues, the watchdog keeps a lock over the kill, and vector
// fencing accepts every holder in turn and refuses a stale one.
func TestRedlock(t *testing.T) {
	for name, dial := range redlockDial {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var nodes []lock.Redis
			var servers []*testenv.RedisServer
			for range 5 {
				s := testenv.StartRedis(t)
				servers = append(servers, s)
				nodes = append(nodes, dial(t, s.Addr))
			}
			c := lock.NewRedlock(nodes, lock.WithPrefix("rl:"))
			t.Cleanup(func() { c.Close() })
			ctx := ctxTimeout(t, 60*time.Second)

			// a lock held by the watchdog across the kill of a node
			kept, err := c.Lock(ctx, "kept", lock.WithWatchdog(600*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}

			var holders, done atomic.Int32
			fence := &vectorFence{}
			var wg sync.WaitGroup
			const goroutines, rounds = 10, 10
			killed := make(chan struct{})
			for range goroutines {
				wg.Go(func() {
					for range rounds {
						l, err := c.Lock(ctx, "hot", lock.WithTTL(5*time.Second))
						if err != nil {
							t.Error(err)
							return
						}
						if n := holders.Add(1); n != 1 {
							t.Errorf("%d holders at once", n)
						}
						if !fence.accept(l.Tokens()) {
							t.Errorf("vector fence refused a fresh holder: %v, seen %v", l.Tokens(), fence.seen)
						}
						time.Sleep(2 * time.Millisecond)
						holders.Add(-1)
						if err := l.Unlock(ctx); err != nil {
							t.Error(err)
						}
						if done.Add(1) == goroutines*rounds/2 {
							servers[2].Kill()
							close(killed)
						}
					}
				})
			}
			wg.Wait()
			<-killed
			if n := done.Load(); n != goroutines*rounds {
				t.Fatalf("%d acquisitions, want %d", n, goroutines*rounds)
			}

			// a stale holder: its lease ran out, someone else took the lock
			stale, err := c.TryLock(ctx, "stale", lock.WithTTL(100*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			staleFence := &vectorFence{}
			staleFence.accept(stale.Tokens())
			time.Sleep(150 * time.Millisecond)
			fresh, err := c.TryLock(ctx, "stale")
			if err != nil {
				t.Fatal(err)
			}
			if !staleFence.accept(fresh.Tokens()) {
				t.Errorf("fresh holder refused: %v after %v", fresh.Tokens(), stale.Tokens())
			}
			if staleFence.accept(stale.Tokens()) {
				t.Errorf("stale holder accepted: %v after %v", stale.Tokens(), fresh.Tokens())
			}
			fresh.Unlock(ctx)

			select {
			case <-kept.Done():
				t.Fatalf("the watchdog lost the lock with 4 of 5 nodes up: %v", context.Cause(kept.Context()))
			default:
			}
			if ttl, err := kept.TTL(ctx); err != nil || ttl <= 0 {
				t.Errorf("TTL = %v, %v", ttl, err)
			}

			// with 3 of 5 nodes down no quorum is possible, and the
			// partial acquisition on the live nodes is undone
			servers[0].Kill()
			servers[4].Kill()
			_, err = c.TryLock(ctx, "noquorum", lock.WithTTL(time.Second))
			var qe *lock.QuorumError
			if !errors.As(err, &qe) || qe.OK != 2 || qe.Quorum != 3 || errors.Is(err, lock.ErrNotObtained) {
				t.Fatalf("got %v, want a QuorumError with 2 of 3 and no ErrNotObtained", err)
			}
			for _, i := range []int{1, 3} {
				raw := rawClient(t, servers[i].Addr)
				if n := raw.Exists(ctx, "rl:{noquorum}").Val(); n != 0 {
					t.Errorf("node %d still holds the failed acquisition", i)
				}
			}
			select {
			case <-kept.Done():
				if cause := context.Cause(kept.Context()); !errors.Is(cause, lock.ErrLost) {
					t.Errorf("cause %v, want ErrLost", cause)
				}
			case <-time.After(2 * time.Second):
				t.Error("no lost signal with 3 of 5 nodes down")
			}
		})
	}
}

// TestRedlockContention: a Redlock lock taken on other nodes reports
// ErrNotObtained (taken), and a waiter is woken by the release.
func TestRedlockContention(t *testing.T) {
	var nodes []lock.Redis
	for range 3 {
		nodes = append(nodes, redlockDial["rueidis"](t, testenv.StartRedis(t).Addr))
	}
	c1 := lock.NewRedlock(nodes)
	c2 := lock.NewRedlock(nodes)
	t.Cleanup(func() { c1.Close(); c2.Close() })
	ctx := ctxTimeout(t, 20*time.Second)
	l, err := c1.TryLock(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c2.TryLock(ctx, "x"); !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("got %v, want ErrNotObtained", err)
	}
	got := make(chan error)
	go func() {
		l2, err := c2.Lock(ctx, "x", lock.WithRetry(lock.LinearBackoff(10*time.Second)))
		if err == nil {
			l2.Unlock(ctx)
		}
		got <- err
	}()
	time.Sleep(100 * time.Millisecond)
	l.Unlock(ctx)
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the Redlock waiter was not woken by the release")
	}
}
