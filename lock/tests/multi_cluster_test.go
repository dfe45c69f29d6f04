package tests

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/lock"
)

// TestMultiLatchCluster runs a multi-lock over names on every master of a
// 3-master Cluster (no script touches two slots: one would fail with
// CROSSSLOT), with a second client's overlapping TryLock refused and its
// Lock served once the first lets go, and a latch whose awaiter, on one
// client, is woken through cluster pub/sub by another's CountDown.
func TestMultiLatchCluster(t *testing.T) {
	dials, raw := startCluster(t)
	for name, dial := range dials {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := ctxTimeout(t, time.Minute)
			prefix := "multi-" + name + ":"
			c1 := newClient(t, dial(), prefix)
			c2 := newClient(t, dial(), prefix)
			names := []string{"m0", "m1", "m2", "m3", "m4", "m5", "m6", "m7"}
			masters := map[string]bool{}
			for _, n := range names {
				m, err := raw.MasterForKey(ctx, prefix+"{"+n+"}")
				if err != nil {
					t.Fatal(err)
				}
				masters[m.Options().Addr] = true
			}
			if len(masters) < 2 {
				t.Fatalf("the names are on %d masters", len(masters))
			}

			h, err := c1.MultiLock(names...).TryLock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c2.MultiLock("m7", "x0", "x1").TryLock(ctx); !errors.Is(err, lock.ErrNotObtained) {
				t.Errorf("an overlapping TryLock: %v", err)
			}
			for _, n := range []string{"x0", "x1"} {
				if held, err := c2.IsLocked(ctx, n); err != nil || held {
					t.Errorf("%s after the failed TryLock: locked %v (%v)", n, held, err)
				}
			}
			ch := lockAsync(func() (*lock.Lock, error) {
				h2, err := c2.MultiLock("x0", "m3").Lock(ctx)
				if err == nil {
					err = h2.Unlock(ctx)
				}
				return nil, err
			})
			waitInLine(t, c1, "m3", 1)
			if err := h.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if res := <-ch; res.err != nil {
				t.Fatal(res.err)
			}

			l := c2.Latch("latch")
			if ok, err := l.TrySetCount(ctx, 2); !ok || err != nil {
				t.Fatal(ok, err)
			}
			done := make(chan error, 1)
			go func() { done <- c1.Latch("latch").Await(ctx) }()
			waitFor(t, 20*time.Second, "the awaiter's place", func() bool {
				return raw.HLen(ctx, prefix+"{latch}:latch:w").Val() == 1
			})
			for range 2 {
				if err := l.CountDown(ctx); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(15 * time.Second):
				t.Fatal("the awaiter did not return within 15 s of the opening")
			}
		})
	}
}

// TestMultiLockRedlock: a multi-lock on Redlock clients takes each name on
// a quorum of nodes (a token per node), refuses an overlapping TryLock of
// another client, which then holds none of its names, and serves that
// client's Lock once it lets go.
func TestMultiLockRedlock(t *testing.T) {
	var n1, n2 []lock.Redis
	for range 3 {
		addr := testenv.StartRedis(t).Addr
		n1 = append(n1, dialRueidis(t, addr))
		n2 = append(n2, dialGoRedis(t, addr))
	}
	c1 := lock.NewRedlock(n1)
	c2 := lock.NewRedlock(n2)
	t.Cleanup(func() { c1.Close(); c2.Close() })
	ctx := ctxTimeout(t, time.Minute)
	opt := lock.WithWatchdog(redlockLease)

	h, err := c1.MultiLock("c", "a", "b").TryLock(ctx, opt)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range h.Locks() {
		if toks := l.Tokens(); len(toks) != 3 {
			t.Errorf("%s: tokens %v", l.Key(), toks)
		}
	}
	if _, err := c2.MultiLock("d", "b").TryLock(ctx, opt); !errors.Is(err, lock.ErrNotObtained) {
		t.Errorf("an overlapping TryLock: %v", err)
	}
	if held, err := c2.IsLocked(ctx, "d"); err != nil || held {
		t.Errorf("d after the failed TryLock: locked %v (%v)", held, err)
	}
	ch := lockAsync(func() (*lock.Lock, error) {
		h2, err := c2.MultiLock("d", "b").Lock(ctx, opt)
		if err == nil {
			err = h2.Unlock(context.WithoutCancel(ctx))
		}
		return nil, err
	})
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if res := <-ch; res.err != nil {
		t.Fatal(res.err)
	}
}
