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

// TestLatch: TrySetCount sets only an open latch, CountDown stops at zero
// and opens it (its key gone), the expiry is set and refreshed, and runs
// out; Await returns at once on an open latch, and gives up its place when
// its context ends or its client closes; Redlock clients refuse latches.
func TestLatch(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		ctx := ctxTimeout(t, time.Minute)
		c := newClient(t, r, prefix)
		raw := rawClient(t, testenv.RedisAddr(t))
		const expiry = time.Minute
		l := c.Latch("basic", lock.WithLatchExpiry(expiry))
		key := prefix + "{basic}:latch"
		count := func(want int64) {
			t.Helper()
			if n, err := l.Count(ctx); err != nil || n != want {
				t.Fatalf("count %d (%v), want %d", n, err, want)
			}
		}
		count(0)
		if err := l.Await(ctx); err != nil {
			t.Fatalf("Await of a latch never set: %v", err)
		}
		if _, err := l.TrySetCount(ctx, 0); !errors.Is(err, lock.ErrOption) {
			t.Errorf("TrySetCount(0): %v", err)
		}
		if ok, err := l.TrySetCount(ctx, 3); !ok || err != nil {
			t.Fatalf("TrySetCount(3): %v %v", ok, err)
		}
		if ok, err := l.TrySetCount(ctx, 5); ok || err != nil {
			t.Errorf("TrySetCount(5) of a set latch: %v %v", ok, err)
		}
		count(3)
		if ttl := raw.PTTL(ctx, key).Val(); ttl <= 0 || ttl > expiry {
			t.Errorf("expiry %v, want up to %v", ttl, expiry)
		}
		raw.PExpire(ctx, key, expiry/2)
		if err := l.CountDown(ctx); err != nil {
			t.Fatal(err)
		}
		count(2)
		if ttl := raw.PTTL(ctx, key).Val(); ttl <= expiry/2 || ttl > expiry {
			t.Errorf("expiry %v after CountDown, want it set again to %v", ttl, expiry)
		}
		for range 3 {
			if err := l.CountDown(ctx); err != nil {
				t.Fatal(err)
			}
		}
		count(0)
		if n := raw.Exists(ctx, key).Val(); n != 0 {
			t.Error("an open latch left its key")
		}
		if err := l.Await(ctx); err != nil {
			t.Fatalf("Await of an open latch: %v", err)
		}
		if ok, err := l.TrySetCount(ctx, 1); !ok || err != nil {
			t.Fatalf("TrySetCount of an open latch: %v %v", ok, err)
		}

		// an Await whose context ends, or whose client closes, gives up
		// its place
		wctx, cancel := context.WithCancel(ctx)
		ch := make(chan error, 1)
		go func() { ch <- l.Await(wctx) }()
		places := prefix + "{basic}:latch:w"
		waitFor(t, 10*time.Second, "the awaiter's place", func() bool { return raw.HLen(ctx, places).Val() == 1 })
		cancel()
		if err := <-ch; !errors.Is(err, context.Canceled) {
			t.Errorf("Await: %v", err)
		}
		if n := raw.HLen(ctx, places).Val(); n != 0 {
			t.Errorf("%d places left after the Await gave up", n)
		}
		closing := lock.New(r, lock.WithPrefix(prefix))
		go func() { ch <- closing.Latch("basic").Await(ctx) }()
		waitFor(t, 10*time.Second, "the awaiter's place", func() bool { return raw.HLen(ctx, places).Val() == 1 })
		closing.Close()
		if err := <-ch; !errors.Is(err, lock.ErrClosed) {
			t.Errorf("Await when its client closes: %v", err)
		}
		if n := raw.HLen(ctx, places).Val(); n != 0 {
			t.Errorf("%d places left after the client closed", n)
		}

		// a latch untouched for its expiry is gone, and reads as zero
		short := c.Latch("short", lock.WithLatchExpiry(200*time.Millisecond))
		if ok, err := short.TrySetCount(ctx, 1); !ok || err != nil {
			t.Fatal(ok, err)
		}
		waitFor(t, 20*time.Second, "the latch's expiry", func() bool {
			n, err := short.Count(ctx)
			return err == nil && n == 0
		})

		rl := lock.NewRedlock([]lock.Redis{r, r, r}, lock.WithPrefix(prefix))
		defer rl.Close()
		if _, err := rl.Latch("basic").TrySetCount(ctx, 1); !errors.Is(err, lock.ErrOption) {
			t.Errorf("a latch on Redlock: %v", err)
		}
	})
}

// TestLatchAwait: awaiters of several clients wait while counters of other
// clients count the latch down, and each returns once it is at zero and
// not before: none has returned while one count is left, and the count is
// zero when each returns. They wait without polling: the awaiters' clients
// (counting) run at most three scripts per awaiter (its first look, one
// after its client subscribed, one after the opening's message), plus one
// per awaiter every 20 s that the test ran.
func TestLatchAwait(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		const clients, perClient, counters = 3, 3, 6
		addr := testenv.RedisAddr(t)
		ctx := ctxTimeout(t, 2*time.Minute)
		raw := rawClient(t, addr)
		name := "await"
		check := newClient(t, r, prefix).Latch(name)
		if ok, err := check.TrySetCount(ctx, counters); !ok || err != nil {
			t.Fatal(ok, err)
		}
		start := time.Now()
		var counted []*counting
		var returned atomic.Int32
		errs := make(chan error, clients*perClient)
		for range clients {
			cr := &counting{Redis: a.dial(t, addr)}
			counted = append(counted, cr)
			l := newClient(t, cr, prefix).Latch(name)
			for range perClient {
				go func() {
					err := l.Await(ctx)
					if err == nil {
						if n, cerr := check.Count(ctx); cerr != nil || n != 0 {
							err = errors.New("Await returned with the count above zero")
						}
					}
					returned.Add(1)
					errs <- err
				}()
			}
		}
		places := prefix + "{" + name + "}:latch:w"
		waitFor(t, 20*time.Second, "every awaiter's place", func() bool {
			return raw.HLen(ctx, places).Val() == clients*perClient
		})

		var wg sync.WaitGroup
		for i := range counters - 1 {
			c := newClient(t, a.dial(t, addr), prefix)
			wg.Go(func() {
				time.Sleep(time.Duration(i) * 20 * time.Millisecond)
				if err := c.Latch(name).CountDown(ctx); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if n, err := check.Count(ctx); err != nil || n != 1 {
			t.Fatalf("count %d (%v), want 1", n, err)
		}
		// time for a poller to show itself
		time.Sleep(500 * time.Millisecond)
		if n := returned.Load(); n != 0 {
			t.Fatalf("%d awaiters returned with a count left", n)
		}
		if err := check.CountDown(ctx); err != nil {
			t.Fatal(err)
		}
		for range clients * perClient {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
		elapsed := time.Since(start)
		var scripts int64
		for _, cr := range counted {
			scripts += cr.evals.Load()
		}
		limit := int64(clients*perClient) * (3 + int64(elapsed/(20*time.Second)))
		t.Logf("%d awaiters, %d scripts in %v", clients*perClient, scripts, elapsed.Round(time.Millisecond))
		if scripts > limit {
			t.Errorf("the awaiters ran %d scripts in %v, at most %d without polling", scripts, elapsed, limit)
		}
		if n := raw.HLen(ctx, places).Val(); n != 0 {
			t.Errorf("%d places left once every awaiter returned", n)
		}
	})
}

// TestLatchLostMessage: the opening's message to an awaiter is lost (its
// client's subscription drops it), and the subscription then breaks: the
// client resubscribes, and the awaiter, which asks Redis after that,
// returns. In "set again" the latch is set again for a new round before
// the awaiter asks: it returns all the same (its place was marked opened),
// and the new round is left as it is.
func TestLatchLostMessage(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		for _, again := range []bool{false, true} {
			name := map[bool]string{false: "lost", true: "set again"}[again]
			t.Run(name, func(t *testing.T) {
				addr := testenv.RedisAddr(t)
				ctx := ctxTimeout(t, time.Minute)
				raw := rawClient(t, addr)
				d := &dropOnce{Redis: a.dial(t, addr), dropped: make(chan struct{}), end: make(chan struct{}), ready: make(chan struct{}, 8)}
				c := newClient(t, d, prefix)
				setter := newClient(t, r, prefix).Latch(name)
				// subscribed before the Await: no re-check of that
				// subscription's is pending when the message is dropped
				if err := c.Latch("warm-up").Await(ctx); err != nil {
					t.Fatal(err)
				}
				select {
				case <-d.ready:
				case <-time.After(20 * time.Second):
					t.Fatal("not subscribed within 20 s")
				}
				if ok, err := setter.TrySetCount(ctx, 1); !ok || err != nil {
					t.Fatal(ok, err)
				}
				ch := make(chan error, 1)
				go func() { ch <- c.Latch(name).Await(ctx) }()
				places := prefix + "{" + name + "}:latch:w"
				waitFor(t, 20*time.Second, "the awaiter's place", func() bool { return raw.HLen(ctx, places).Val() == 1 })
				if err := setter.CountDown(ctx); err != nil {
					t.Fatal(err)
				}
				select {
				case <-d.dropped:
				case <-time.After(20 * time.Second):
					t.Fatal("the opening's message did not come within 20 s")
				}
				if again {
					if ok, err := setter.TrySetCount(ctx, 1); !ok || err != nil {
						t.Fatal(ok, err)
					}
				}
				select {
				case err := <-ch:
					t.Fatalf("Await returned without its message (%v): the test does not test the re-check", err)
				default:
				}
				close(d.end)
				// an awaiter that relied on its next look, 20 s away, would
				// not return by then (and with the latch set again, never)
				select {
				case err := <-ch:
					if err != nil {
						t.Fatal(err)
					}
				case <-time.After(15 * time.Second):
					t.Fatal("Await did not return within 15 s of the resubscription")
				}
				if n := d.subs.Load(); n != 2 {
					t.Errorf("%d subscriptions", n)
				}
				want := int64(0)
				if again {
					want = 1
				}
				if n, err := setter.Count(ctx); err != nil || n != want {
					t.Errorf("count %d (%v), want %d", n, err, want)
				}
				if n := raw.HLen(ctx, places).Val(); n != 0 {
					t.Errorf("%d places left", n)
				}
			})
		}
	})
}

// dropOnce is a client whose first subscription drops every message and
// ends when the test says so (end); the next ones work.
type dropOnce struct {
	lock.Redis
	subs    atomic.Int32
	dropped chan struct{} // closed when the first message was dropped
	end     chan struct{} // closed by the test: the first subscription ends
	ready   chan struct{} // a subscription was confirmed
	once    sync.Once
}

func (d *dropOnce) Subscribe(ctx context.Context, channel string, ready func(), message func(string)) error {
	onReady := func() {
		select {
		case d.ready <- struct{}{}:
		default:
		}
		ready()
	}
	if d.subs.Add(1) > 1 {
		return d.Redis.Subscribe(ctx, channel, onReady, message)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-d.end:
			cancel()
		case <-sctx.Done():
		}
	}()
	return d.Redis.Subscribe(sctx, channel, onReady, func(string) { d.once.Do(func() { close(d.dropped) }) })
}
