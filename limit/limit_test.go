package limit_test

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/limit"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

type limiter[K comparable] interface {
	Allow(ctx context.Context, k K) (bool, time.Duration)
}

// burstThenRefuse checks that key k gets exactly burst requests through at
// once, then a refusal with a wait of about one emission interval, while
// another key still passes.
func burstThenRefuse[K comparable](t *testing.T, l limiter[K], k, other K, burst int, interval time.Duration) {
	t.Helper()
	ctx := context.Background()
	for i := range burst {
		if ok, _ := l.Allow(ctx, k); !ok {
			t.Fatalf("request %d of a burst of %d refused", i+1, burst)
		}
	}
	ok, wait := l.Allow(ctx, k)
	if ok {
		t.Fatalf("request %d passed; the burst is %d", burst+1, burst)
	}
	// The wait is what is left of one interval: positive, at most one.
	if wait <= 0 || wait > interval+10*time.Millisecond {
		t.Errorf("wait %v, want within (0, %v]", wait, interval)
	}
	if ok, _ := l.Allow(ctx, other); !ok {
		t.Error("another key was refused")
	}
}

func TestLocal(t *testing.T) {
	l := limit.NewLocal[int64](limit.Rate{PerSecond: 2, Burst: 5}, 0)
	burstThenRefuse[int64](t, l, 1, 2, 5, 500*time.Millisecond)

	a := limit.NewLocal[netip.Addr](limit.Rate{PerSecond: 10}, 0)
	burstThenRefuse(t, a, netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), 10, 100*time.Millisecond)
}

// TestLocalRefills: after the wait it names, a refused key passes again.
func TestLocalRefills(t *testing.T) {
	l := limit.NewLocal[int64](limit.Rate{PerSecond: 20, Burst: 1}, 0)
	ctx := context.Background()
	l.Allow(ctx, 1)
	ok, wait := l.Allow(ctx, 1)
	if ok {
		t.Fatal("second request at once passed")
	}
	time.Sleep(wait)
	if ok, wait := l.Allow(ctx, 1); !ok {
		t.Errorf("refused again after waiting as told (now told %v)", wait)
	}
}

// TestLocalBounded: a crowd of keys does not grow the limiter past its
// bound.
func TestLocalBounded(t *testing.T) {
	l := limit.NewLocal[int64](limit.Rate{PerSecond: 1}, 1000)
	for k := range int64(100_000) {
		l.Allow(context.Background(), k)
	}
	if n := l.Len(); n != 1000 {
		t.Errorf("holds %d keys, want 1000", n)
	}
}

func redisClient(t *testing.T, addr string) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// TestRedis: the limit holds across instances (two clients, as two
// processes would have), on Redis and on the embedded miniredis.
func TestRedis(t *testing.T) {
	for _, srv := range []struct{ name, addr string }{
		{"redis", testenv.RedisAddr(t)},
		{"miniredis", miniredis.RunT(t).Addr()},
	} {
		t.Run(srv.name, func(t *testing.T) {
			prefix := testenv.Prefix(t)
			key := func(uid int64) string { return prefix + ":u:" + strconv.FormatInt(uid, 10) }
			r := limit.Rate{PerSecond: 4, Burst: 6}
			a := limit.NewRedis(redisClient(t, srv.addr), r, key, discard)
			b := limit.NewRedis(redisClient(t, srv.addr), r, key, discard)
			ctx := context.Background()
			for i := range 3 {
				if ok, _ := a.Allow(ctx, 1); !ok {
					t.Fatalf("request %d on a refused", i)
				}
				if ok, _ := b.Allow(ctx, 1); !ok {
					t.Fatalf("request %d on b refused", i)
				}
			}
			ok, wait := b.Allow(ctx, 1)
			if ok || wait <= 0 || wait > 260*time.Millisecond {
				t.Errorf("seventh request across two instances: ok=%v wait=%v; want refused, wait <= 250ms", ok, wait)
			}
			if ok, _ := a.Allow(ctx, 2); !ok {
				t.Error("another user was refused")
			}
		})
	}
}

// TestRedisDownLetsThrough: without Redis the limiter lets requests pass
// (the grab itself then answers unavailable).
func TestRedisDownLetsThrough(t *testing.T) {
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t)), MaxRetries: -1})
	defer dead.Close()
	l := limit.NewRedis(dead, limit.Rate{PerSecond: 1}, func(k int64) string { return "x" }, discard)
	for range 3 {
		if ok, _ := l.Allow(context.Background(), 1); !ok {
			t.Fatal("refused while redis is down")
		}
	}
}

// TestBlocklist: a block made on one instance holds there at once and on
// another after its next poll; unblocking undoes it; losing the keys in
// Redis empties every copy.
func TestBlocklist(t *testing.T) {
	addr := testenv.RedisAddr(t)
	prefix := testenv.Prefix(t)
	a := limit.NewBlocklist(redisClient(t, addr), prefix, discard)
	b := limit.NewBlocklist(redisClient(t, addr), prefix, discard)
	b.PollInterval = 10 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()

	for _, uid := range []int64{42, 7, 1 << 62} {
		if err := a.Block(ctx, uid); err != nil {
			t.Fatal(err)
		}
		if !a.Blocked(uid) {
			t.Fatalf("user %d not blocked at once on the instance that blocked it", uid)
		}
	}
	testenv.WaitFor(t, "block seen by the other instance", func() bool { return b.Blocked(42) && b.Blocked(7) && b.Blocked(1<<62) })
	if b.Blocked(43) {
		t.Error("user 43 blocked")
	}
	list, err := b.List(ctx)
	if err != nil || !slices.Equal(list, []int64{7, 42, 1 << 62}) {
		t.Errorf("list: %v, %v", list, err)
	}
	if err := b.Unblock(ctx, 42); err != nil {
		t.Fatal(err)
	}
	if b.Blocked(42) {
		t.Error("user 42 still blocked right after unblocking")
	}
	if err := a.Load(ctx); err != nil || a.Blocked(42) || !a.Blocked(7) {
		t.Errorf("after a load: 42 blocked %v, 7 blocked %v, err %v", a.Blocked(42), a.Blocked(7), err)
	}
	rdb := redisClient(t, addr)
	if err := rdb.Del(ctx, prefix+":{blocklist}:users", prefix+":{blocklist}:version").Err(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "an empty list after redis lost it", func() bool { return !b.Blocked(7) })
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// TestBlocklistMiniredis: the embedded default runs the same commands.
func TestBlocklistMiniredis(t *testing.T) {
	m := miniredis.RunT(t)
	l := limit.NewBlocklist(redisClient(t, m.Addr()), "p", discard)
	ctx := context.Background()
	if err := l.Block(ctx, 5); err != nil || !l.Blocked(5) {
		t.Fatalf("block: %v, blocked %v", err, l.Blocked(5))
	}
	if err := l.Unblock(ctx, 5); err != nil || l.Blocked(5) {
		t.Fatalf("unblock: %v, blocked %v", err, l.Blocked(5))
	}
}

func BenchmarkLocal(b *testing.B) {
	l := limit.NewLocal[int64](limit.Rate{PerSecond: 1e9}, 0)
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		l.Allow(ctx, int64(i%1000))
	}
}
