package tests

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/lock"
	"github.com/seckilldev/seckill/lock/goredis"
	"github.com/seckilldev/seckill/lock/rueidislock"
)

// TestSentinel runs the lock through Sentinel-aware clients (go-redis's
// failover client, rueidis with a master set), across a failover: after it,
// locks are taken and released on the new master, waiters are still woken
// (the subscription follows the master), and fencing tokens keep growing.
//
// What a failover can also do, and this test does not hide: a lock taken on
// the old master and not yet replicated vanishes (see the package
// documentation). With a coordinated failover (SENTINEL FAILOVER) we also
// saw go-redis take a lock on the old master in the seconds before Sentinel
// demoted it, and the demotion wipe it. Here the old master crashes.
func TestSentinel(t *testing.T) {
	master, _ := testenv.StartReplicated(t)
	sentinel := testenv.StartSentinel(t, master, 1)
	dials := map[string]func() lock.Redis{
		"goredis": func() lock.Redis {
			c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: sentinel.MasterName,
				SentinelAddrs: []string{sentinel.Addr}})
			t.Cleanup(func() { c.Close() })
			return goredis.New(c)
		},
		"rueidis": func() lock.Redis {
			c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{sentinel.Addr},
				Sentinel: rueidis.SentinelOption{MasterSet: sentinel.MasterName}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			return rueidislock.New(c)
		},
	}
	ctx := ctxTimeout(t, 60*time.Second)
	clients := map[string]*lock.Client{}
	tokens := map[string]int64{}
	for name, dial := range dials {
		c := newClient(t, dial(), name+":")
		clients[name] = c
		l, err := c.Lock(ctx, "s")
		if err != nil {
			t.Fatal(name, err)
		}
		tokens[name] = l.Token()
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(name, err)
		}
	}

	// the master crashes; the Sentinel promotes the replica
	master.Kill()
	newMaster := sentinel.WaitFailover(t, master)
	t.Logf("failed over from %s to %s", master.Addr, newMaster)

	for name, c := range clients {
		t.Run(name, func(t *testing.T) {
			// the clients find the new master within a few retries
			var l *lock.Lock
			var err error
			waitFor(t, 15*time.Second, "a lock on the new master", func() bool {
				l, err = c.TryLock(ctx, "s")
				return err == nil
			})
			if l.Token() <= tokens[name] {
				t.Errorf("token %d after the failover, %d before", l.Token(), tokens[name])
			}
			got := make(chan error, 1)
			go func() {
				l2, err := c.Lock(ctx, "s", lock.WithRetry(lock.LinearBackoff(10*time.Second)))
				if err == nil {
					err = l2.Unlock(ctx)
				}
				got <- err
			}()
			time.Sleep(100 * time.Millisecond)
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-got:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("waiter not woken after the failover")
			}
			if _, err := c.TryLock(ctx, "s2"); err != nil && !errors.Is(err, lock.ErrNotObtained) {
				t.Fatal(err)
			}
		})
	}
}
