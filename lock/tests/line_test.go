package tests

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/lock"
)

// TestLineOrder: waiters of nine clients (processes) are given the lock in
// the order they joined the line, one after the other, each by the previous
// holder's release.
func TestLineOrder(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		ctx := ctxTimeout(t, 20*time.Second)
		addr := testenv.RedisAddr(t)
		const waiters = 9
		clients := []*lock.Client{newClient(t, r, prefix)}
		for range waiters - 1 {
			clients = append(clients, newClient(t, a.dial(t, addr), prefix))
		}
		holder, err := clients[0].TryLock(ctx, "line")
		if err != nil {
			t.Fatal(err)
		}
		order := make(chan turn, waiters)
		for i := range waiters {
			go func() {
				l, err := clients[i].Lock(ctx, "line", lock.WithRetry(lock.LinearBackoff(10*time.Second)))
				if err != nil {
					order <- turn{err: err}
					return
				}
				order <- turn{who: strconv.Itoa(i)}
				l.Unlock(ctx)
			}()
			// the next waiter joins once this one is in line
			waitInLine(t, clients[0], "line", i+1)
		}
		holder.Unlock(ctx)
		for want := range waiters {
			got := <-order
			if got.err != nil {
				t.Fatal(got.err)
			}
			if got.who != strconv.Itoa(want) {
				t.Fatalf("waiter %s got the lock in place %d", got.who, want)
			}
		}
	})
}

// TestContentionRoundTrips: 4 clients x 4 goroutines on one key. Every
// acquisition costs one script to join the line, and the release that ends
// it gives the lock to the next waiter: about two scripts per acquisition,
// however many clients wait (a release used to wake a waiter in every
// client, each of which tried again).
func TestContentionRoundTrips(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		ctx := ctxTimeout(t, 60*time.Second)
		addr := testenv.RedisAddr(t)
		var counters []*counting
		var clients []*lock.Client
		for range 4 {
			cr := &counting{Redis: a.dial(t, addr)}
			counters = append(counters, cr)
			clients = append(clients, newClient(t, cr, prefix))
		}
		ex := &exclusion{t: t}
		const each = 25
		var wg sync.WaitGroup
		for _, c := range clients {
			for range 4 {
				wg.Go(func() {
					for range each {
						// polls only after 10 s: what runs is joining and releasing
						l, err := c.Lock(ctx, "rt", lock.WithRetry(lock.LinearBackoff(10*time.Second)))
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
		}
		wg.Wait()
		var scripts int64
		for _, cr := range counters {
			scripts += cr.evals.Load()
		}
		perAcq := float64(scripts) / float64(ex.entries)
		t.Logf("%d acquisitions, %d scripts: %.2f per acquisition", ex.entries, scripts, perAcq)
		if perAcq > 2.1 {
			t.Errorf("%.2f scripts per acquisition, want about 2 (join, release)", perAcq)
		}
	})
}

// TestLineWithinClient: a client that releases a plain mutex passes it to
// its own first waiter, ahead of older waiters of other clients, but at
// most 8 times in a row: then the head of the line gets it.
func TestLineWithinClient(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		ctx := ctxTimeout(t, 20*time.Second)
		mine := newClient(t, r, prefix)
		other := newClient(t, a.dial(t, testenv.RedisAddr(t)), prefix)
		holder, err := mine.TryLock(ctx, "cohort")
		if err != nil {
			t.Fatal(err)
		}
		inLine := func(n int) {
			waitInLine(t, mine, "cohort", n)
		}
		order := make(chan turn, 11)
		take := func(c *lock.Client, who string) {
			l, err := c.Lock(ctx, "cohort", lock.WithRetry(lock.LinearBackoff(10*time.Second)))
			if err != nil {
				order <- turn{err: err}
				return
			}
			order <- turn{who: who}
			l.Unlock(ctx)
		}
		go take(other, "other") // first in line
		inLine(1)
		for i := range 10 {
			go take(mine, "mine")
			inLine(i + 2)
		}
		holder.Unlock(ctx)
		var got []string
		for range 11 {
			tr := <-order
			if tr.err != nil {
				t.Fatal(tr.err)
			}
			got = append(got, tr.who)
		}
		want := []string{"mine", "mine", "mine", "mine", "mine", "mine", "mine", "mine", "other", "mine", "mine"}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("order %v, want %v", got, want)
		}
	})
}

// TestWaiterGone: a waiter whose process is gone (it stopped refreshing its
// place, and nothing cancelled it) is skipped: the lock goes to the next
// waiter, not to the dead one for a whole lease.
func TestWaiterGone(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		ctx := ctxTimeout(t, 20*time.Second)
		c := newClient(t, r, prefix)
		holder, err := c.TryLock(ctx, "gone")
		if err != nil {
			t.Fatal(err)
		}
		// the dead waiter: joins the line, then its client stops answering
		h := &hanging{Redis: r, hang: make(chan struct{})}
		dead := newClient(t, h, prefix)
		dctx, cancel := context.WithCancel(ctx)
		defer cancel()
		lease := 300 * time.Millisecond // its place lasts 300 ms unless refreshed
		go dead.Lock(dctx, "gone", lock.WithWatchdog(lease))
		waitInLine(t, c, "gone", 1)
		close(h.hang) // it can no longer refresh, nor leave the line
		got := lockAsync(func() (*lock.Lock, error) {
			return c.Lock(ctx, "gone", lock.WithRetry(lock.LinearBackoff(10*time.Second)))
		})
		waitInLine(t, c, "gone", 2)
		time.Sleep(2 * lease) // the dead waiter's place runs out
		holder.Unlock(ctx)
		select {
		case a := <-got:
			a.must(t).Unlock(ctx)
		case <-time.After(5 * time.Second):
			st, _ := c.Inspect(ctx, "gone")
			t.Fatalf("the live waiter did not get the lock: %+v", st)
		}
	})
}

// TestReleaseHandsToWaiter: a lock taken while nobody waited, then waited
// for by another client, goes straight to that waiter when it is released:
// the release finds the waiter (the waiter marked the hold, see mark in
// scripts/contended.lua) and does not just free the lock for the waiter's
// next poll.
func TestReleaseHandsToWaiter(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		ctx := ctxTimeout(t, 20*time.Second)
		holderC := newClient(t, r, prefix)
		waiterC := newClient(t, a.dial(t, testenv.RedisAddr(t)), prefix)
		for _, lockFn := range []string{"TryLock", "Lock"} {
			name := "hand-" + lockFn
			var holder *lock.Lock
			var err error
			if lockFn == "TryLock" {
				holder, err = holderC.TryLock(ctx, name)
			} else {
				holder, err = holderC.Lock(ctx, name)
			}
			if err != nil {
				t.Fatal(err)
			}
			got, done := make(chan error, 1), make(chan struct{})
			go func() {
				l, err := waiterC.Lock(ctx, name, lock.WithRetry(lock.LinearBackoff(10*time.Second)))
				if err == nil {
					<-done
					err = l.Unlock(ctx)
				}
				got <- err
			}()
			waitInLine(t, holderC, name, 1)
			if err := holder.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			st, err := holderC.Inspect(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			close(done)
			if len(st.Holds) != 1 || st.Holds[0].Token <= holder.Token() {
				t.Fatalf("%s: right after the release the lock is %+v, want held by the waiter with a newer token", lockFn, st)
			}
			if err := <-got; err != nil {
				t.Fatal(err)
			}
		}
	})
}
