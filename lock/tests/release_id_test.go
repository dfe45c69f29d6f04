package tests

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/lock"
)

// TestReleaseByID: a semaphore hold released by its ID from another
// client (Redisson's RPermitExpirableSemaphore.release(permitId)): its
// permits go to the waiter that now fits; a second release, and one of an
// ID the semaphore does not hold (a meta field's name, a mutex's hold, an
// expired hold), is ErrNotHeld and changes nothing; the holder's context
// ends with ErrLost at its next renewal, or when its fixed lease runs out;
// its late access is refused by the per-slot fence once the next holder
// has used the resource.
func TestReleaseByID(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		ctx := ctxTimeout(t, 60*time.Second)
		addr := testenv.RedisAddr(t)
		rdb := rawClient(t, addr)
		holder, other, waiter := newClient(t, r, prefix), newClient(t, a.dial(t, addr), prefix), newClient(t, a.dial(t, addr), prefix)
		const name, permits = "by-id", 3
		sem := func(c *lock.Client) *lock.Semaphore { return c.Semaphore(name, permits) }

		h, err := sem(holder).AcquireN(ctx, 2, lock.WithWatchdog(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		one, err := sem(holder).TryAcquire(ctx, lock.WithTTL(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if st, err := holder.Inspect(ctx, name); err != nil || len(st.Holds) != 2 || st.Holds[0].ID != h.ID() || st.Holds[1].ID != one.ID() {
			t.Fatalf("Inspect: %+v, %v; IDs %s, %s", st, err, h.ID(), one.ID())
		}
		want := lockAsync(func() (*lock.Lock, error) { return sem(waiter).AcquireN(ctx, 2) })
		waitInLine(t, holder, name, 1)

		// IDs the semaphore has no hold of change nothing
		m, err := other.TryLock(ctx, "by-id-mutex")
		if err != nil {
			t.Fatal(err)
		}
		defer m.Unlock(ctx)
		for _, bad := range []string{"", "n", "k", "nobody.1", m.ID()} {
			if err := sem(other).Release(ctx, bad); !errors.Is(err, lock.ErrNotHeld) {
				t.Errorf("Release(%q): %v, want ErrNotHeld", bad, err)
			}
		}
		if err := other.Semaphore("by-id-mutex", permits).Release(ctx, m.ID()); !errors.Is(err, lock.ErrNotHeld) {
			t.Errorf("Release of a mutex's hold as a semaphore's: %v, want ErrNotHeld", err)
		}
		if ttl, err := m.TTL(ctx); err != nil || ttl <= 0 {
			t.Errorf("the mutex after a Release of its ID: %v, %v", ttl, err)
		}
		if st, err := other.Inspect(ctx, name); err != nil || st.Permits != permits || len(st.Holds) != 2 || st.Waiters != 1 {
			t.Fatalf("after releases of IDs it does not hold: %+v, %v", st, err)
		}

		// another client releases the hold of 2 by its ID: the waiter gets them
		if err := sem(other).Release(ctx, h.ID()); err != nil {
			t.Fatal(err)
		}
		w := (<-want).must(t)
		if !slices.Equal(w.Slots(), h.Slots()) || w.Token() <= one.Token() {
			t.Errorf("the waiter: slots %v token %d; the released hold's slots %v", w.Slots(), w.Token(), h.Slots())
		}
		if p := checkHeld(ctx, rdb, prefix, name, w); p != "" {
			t.Error(p)
		}
		if err := sem(other).Release(ctx, h.ID()); !errors.Is(err, lock.ErrNotHeld) {
			t.Errorf("a second Release: %v, want ErrNotHeld", err)
		}
		if p := checkHeld(ctx, rdb, prefix, name, w); p != "" {
			t.Errorf("after a second Release of another hold's ID: %s", p)
		}

		// the released holder: its late access is refused once the waiter
		// used the resource; it learns of the loss at its next renewal
		keys := func(slots []int) []string {
			var ks []string
			for _, s := range slots {
				ks = append(ks, prefix+"res:fence:"+strconv.Itoa(s))
			}
			return ks
		}
		if ok, err := fenceSlots.Run(ctx, rdb, keys(w.Slots()), w.Token()).Int64Slice(); err != nil || slices.Contains(ok, 0) {
			t.Fatalf("the new holder's access: %v, %v", ok, err)
		}
		if ok, err := fenceSlots.Run(ctx, rdb, keys(h.Slots()), h.Token()).Int64Slice(); err != nil || slices.Contains(ok, 1) {
			t.Errorf("the released holder's late access: %v, %v; want refused on every slot", ok, err)
		}
		select {
		case <-h.Done():
		case <-time.After(20 * time.Second):
			t.Fatal("the released holder's context did not end")
		}
		if cause := context.Cause(h.Context()); !errors.Is(cause, lock.ErrLost) {
			t.Errorf("cause %v, want ErrLost", cause)
		}
		if err := h.Extend(ctx, time.Minute); !errors.Is(err, lock.ErrNotHeld) {
			t.Errorf("Extend of the released hold: %v, want ErrNotHeld", err)
		}
		if err := h.Unlock(ctx); !errors.Is(err, lock.ErrNotHeld) {
			t.Errorf("Unlock of the released hold: %v, want ErrNotHeld", err)
		}

		// a fixed lease: released by ID, its holder learns it when the lease
		// runs out; a release after that is ErrNotHeld
		if err := sem(other).Release(ctx, one.ID()); err != nil {
			t.Fatal(err)
		}
		select {
		case <-one.Done():
		case <-time.After(20 * time.Second):
			t.Fatal("the released fixed-lease holder's context did not end")
		}
		if cause := context.Cause(one.Context()); !errors.Is(cause, lock.ErrLost) {
			t.Errorf("cause %v, want ErrLost", cause)
		}
		if err := sem(other).Release(ctx, one.ID()); !errors.Is(err, lock.ErrNotHeld) {
			t.Errorf("a Release after the lease: %v, want ErrNotHeld", err)
		}
		// a hold that expired, unreleased
		short, err := sem(holder).TryAcquire(ctx, lock.WithTTL(300*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, 20*time.Second, "the short hold's expiry in Redis", func() bool {
			holds, err := redisHolds(ctx, rdb, prefix, name)
			return err == nil && !slices.ContainsFunc(holds, func(h redisHold) bool { return h.id == short.ID() })
		})
		if err := sem(other).Release(ctx, short.ID()); !errors.Is(err, lock.ErrNotHeld) {
			t.Errorf("a Release of an expired hold: %v, want ErrNotHeld", err)
		}
		if err := w.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if st, err := other.Inspect(ctx, name); err != nil || st.Locked() {
			t.Errorf("after every release: %+v, %v", st, err)
		}
	})
}
