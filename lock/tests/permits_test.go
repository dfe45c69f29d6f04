package tests

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/lock"
	"github.com/seckilldev/seckill/lock/goredis"
)

// redisHold is a semaphore hold as Redis has it (scripts/core.lua: a field
// per hold, "<expiry ms> <fencing token> <slot>[,<slot>...]").
type redisHold struct {
	id    string
	token int64
	slots []int
	left  time.Duration // of its lease, by the Redis clock
}

// holdsScript reads a semaphore's live holds and the Redis clock at once,
// without the lock's scripts: the tests check the lock against Redis, not
// against what the lock believes.
var holdsScript = redis.NewScript(`
local t = redis.call('time')
local out = {string.format('%.0f', t[1] * 1000 + math.floor(t[2] / 1000))}
if redis.call('type', KEYS[1]).ok == 'hash' then
	local all = redis.call('hgetall', KEYS[1])
	for i = 1, #all, 2 do
		if string.find(all[i], '.', 1, true) then
			table.insert(out, all[i])
			table.insert(out, all[i + 1])
		end
	end
end
return out`)

// redisHolds returns the live holds of the semaphore called name.
func redisHolds(ctx context.Context, rdb *redis.Client, prefix, name string) ([]redisHold, error) {
	r, err := holdsScript.Run(ctx, rdb, []string{prefix + "{" + name + "}"}).StringSlice()
	if err != nil {
		return nil, err
	}
	now, err := strconv.ParseInt(r[0], 10, 64)
	if err != nil {
		return nil, err
	}
	var out []redisHold
	for i := 1; i+1 < len(r); i += 2 {
		f := strings.Fields(r[i+1])
		if len(f) < 3 {
			return nil, fmt.Errorf("hold %s: %q", r[i], r[i+1])
		}
		e, err1 := strconv.ParseInt(f[0], 10, 64)
		tok, err2 := strconv.ParseInt(f[1], 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("hold %s: %q: %w", r[i], r[i+1], err)
		}
		if e <= now {
			continue // expired: the next script deletes it
		}
		h := redisHold{id: r[i], token: tok, left: time.Duration(e-now) * time.Millisecond}
		for s := range strings.SplitSeq(f[2], ",") {
			n, err := strconv.Atoi(s)
			if err != nil {
				return nil, fmt.Errorf("hold %s: %q: %w", r[i], r[i+1], err)
			}
			h.slots = append(h.slots, n)
		}
		out = append(out, h)
	}
	return out, nil
}

// checkHeld asks Redis whether l, just returned, holds its slots and no
// other hold shares them, with a lease that lasts at least until l's
// ValidUntil; "" if so. A hold whose validity ended before the question
// was sent claims nothing (see check in pause_test.go).
func checkHeld(ctx context.Context, rdb *redis.Client, prefix, name string, l *lock.Lock) string {
	valid := l.ValidUntil()
	before := time.Now()
	holds, err := redisHolds(ctx, rdb, prefix, name)
	after := time.Now() // Redis read the lease between before and after
	if err != nil {
		return err.Error()
	}
	if !before.Before(valid) {
		return ""
	}
	var mine *redisHold
	for i, h := range holds {
		if h.token == l.Token() {
			mine = &holds[i]
			continue
		}
		for _, s := range h.slots {
			if slices.Contains(l.Slots(), s) {
				return fmt.Sprintf("token %d, slots %v: slot %d is held by %+v too", l.Token(), l.Slots(), s, h)
			}
		}
	}
	switch {
	case mine == nil:
		return fmt.Sprintf("valid for %v more, token %d, slots %v: Redis does not hold it (%+v)", valid.Sub(before), l.Token(), l.Slots(), holds)
	case !slices.Equal(mine.slots, l.Slots()):
		return fmt.Sprintf("token %d: slots %v, Redis holds %v", l.Token(), l.Slots(), mine.slots)
	case after.Add(mine.left + time.Millisecond).Before(valid):
		return fmt.Sprintf("valid for %v more, Redis holds it for %v", valid.Sub(before), mine.left)
	}
	return ""
}

// TestPermitsN: a hold of n permits takes n slots at once, all or none,
// with one token, lease, context and Unlock; n outside [1, permits] is
// refused; a fixed lease that runs out frees every slot of the hold.
func TestPermitsN(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		ctx := ctxTimeout(t, 30*time.Second)
		c := newClient(t, r, prefix)
		rdb := rawClient(t, testenv.RedisAddr(t))
		const permits = 5
		sem := c.Semaphore("n", permits)
		for _, n := range []int{0, -1, permits + 1} {
			if _, err := sem.TryAcquireN(ctx, n); !errors.Is(err, lock.ErrOption) {
				t.Errorf("TryAcquireN(%d) of %d permits: %v, want ErrOption", n, permits, err)
			}
			if _, err := sem.AcquireN(ctx, n); !errors.Is(err, lock.ErrOption) {
				t.Errorf("AcquireN(%d) of %d permits: %v, want ErrOption", n, permits, err)
			}
		}
		three, err := sem.TryAcquireN(ctx, 3, lock.WithTTL(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if got := three.Slots(); !slices.Equal(got, []int{0, 1, 2}) || three.Slot() != 0 {
			t.Errorf("slots %v, slot %d: want [0 1 2], 0", got, three.Slot())
		}
		if _, err := sem.TryAcquireN(ctx, 3); !errors.Is(err, lock.ErrNotObtained) {
			t.Errorf("3 permits with 2 free: %v, want ErrNotObtained", err)
		}
		two, err := sem.TryAcquireN(ctx, 2, lock.WithMetadata("two"))
		if err != nil {
			t.Fatal(err)
		}
		if got := two.Slots(); !slices.Equal(got, []int{3, 4}) || two.Token() <= three.Token() {
			t.Errorf("slots %v, token %d after %d: want [3 4] and a larger token", got, two.Token(), three.Token())
		}
		if _, err := sem.TryAcquire(ctx); !errors.Is(err, lock.ErrNotObtained) {
			t.Errorf("a permit of a full semaphore: %v, want ErrNotObtained", err)
		}
		for _, l := range []*lock.Lock{three, two} {
			if p := checkHeld(ctx, rdb, prefix, "n", l); p != "" {
				t.Error(p)
			}
		}
		st, err := c.Inspect(ctx, "n")
		if err != nil || len(st.Holds) != 2 || !slices.Equal(st.Holds[0].Slots, []int{0, 1, 2}) ||
			st.Holds[1].Slot != 3 || !slices.Equal(st.Holds[1].Slots, []int{3, 4}) || st.Holds[1].Metadata != "two" {
			t.Errorf("Inspect: %+v, %v", st, err)
		}

		// the fixed lease runs out: all three slots are free, the holder knows
		<-three.Done()
		if cause := context.Cause(three.Context()); !errors.Is(cause, lock.ErrLost) {
			t.Errorf("cause %v, want ErrLost", cause)
		}
		var again *lock.Lock
		waitFor(t, 10*time.Second, "the expired hold's three slots", func() bool {
			again, err = sem.TryAcquireN(ctx, 3)
			return err == nil
		})
		if got := again.Slots(); !slices.Equal(got, []int{0, 1, 2}) || again.Token() <= two.Token() {
			t.Errorf("slots %v, token %d after the expiry", got, again.Token())
		}
		if err := three.Unlock(ctx); !errors.Is(err, lock.ErrNotHeld) {
			t.Errorf("Unlock of the expired hold: %v, want ErrNotHeld", err)
		}
		// Extend and TTL of a hold of several permits are its own
		if err := two.Extend(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
		if ttl, err := two.TTL(ctx); err != nil || ttl < 50*time.Second {
			t.Errorf("TTL %v, %v after Extend(1m)", ttl, err)
		}
		if ttl, err := again.TTL(ctx); err != nil || ttl > 31*time.Second {
			t.Errorf("the other hold's TTL %v, %v after an Extend of this one", ttl, err)
		}
		// Unlock gives back both permits of two at once
		if err := two.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		last, err := sem.TryAcquireN(ctx, 2)
		if err != nil {
			t.Fatalf("2 permits after the release of a hold of 2: %v", err)
		}
		if got := last.Slots(); !slices.Equal(got, []int{3, 4}) {
			t.Errorf("slots %v, want [3 4]", got)
		}
		last.Unlock(ctx)
		again.Unlock(ctx)
		if st, err := c.Inspect(ctx, "n"); err != nil || st.Locked() {
			t.Errorf("after every release: %+v, %v", st, err)
		}
	})
}

// TestPermitsMiniredis runs holds of several permits, their line and
// their inspection on miniredis (gopher-lua: see TestMiniredis).
func TestPermitsMiniredis(t *testing.T) {
	m := miniredis.RunT(t)
	dial := func() *lock.Client {
		rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { rdb.Close() })
		return newClient(t, goredis.New(rdb), "mini:")
	}
	c1, c2 := dial(), dial()
	ctx := ctxTimeout(t, 30*time.Second)
	big, err := c1.Semaphore("n", 4).TryAcquireN(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	small, err := c1.Semaphore("n", 4).TryAcquire(ctx)
	if err != nil || small.Slot() != 3 || !slices.Equal(big.Slots(), []int{0, 1, 2}) {
		t.Fatalf("slots %v and %v, %v", big.Slots(), small.Slots(), err)
	}
	want := lockAsync(func() (*lock.Lock, error) { return c2.Semaphore("n", 4).AcquireN(ctx, 2) })
	waitInLine(t, c1, "n", 1)
	if err := small.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := c1.Inspect(ctx, "n"); err != nil || len(st.Holds) != 1 || st.Waiters != 1 {
		t.Errorf("1 free, the waiter wants 2: %+v, %v", st, err)
	}
	if err := big.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	got := (<-want).must(t)
	if !slices.Equal(got.Slots(), []int{0, 1}) {
		t.Errorf("the waiter's slots %v", got.Slots())
	}
	if st, err := c1.Inspect(ctx, "n"); err != nil || len(st.Holds) != 1 || !slices.Equal(st.Holds[0].Slots, []int{0, 1}) {
		t.Errorf("Inspect: %+v, %v", st, err)
	}
	if err := got.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestPermitsWatchdog: the watchdog keeps a hold of several permits past
// its lease (3 s, for a loaded 2-core machine: see TestSemaphoreWatchdog).
func TestPermitsWatchdog(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		ctx := ctxTimeout(t, 30*time.Second)
		c := newClient(t, r, prefix)
		rdb := rawClient(t, testenv.RedisAddr(t))
		const lease = 3 * time.Second
		p, err := c.Semaphore("dog-n", 3).AcquireN(ctx, 3, lock.WithWatchdog(lease))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(lease * 3 / 2)
		select {
		case <-p.Done():
			t.Fatalf("lost under the watchdog: %v", context.Cause(p.Context()))
		default:
		}
		if pr := checkHeld(ctx, rdb, prefix, "dog-n", p); pr != "" {
			t.Error(pr)
		}
		if _, err := c.Semaphore("dog-n", 3).TryAcquire(ctx); !errors.Is(err, lock.ErrNotObtained) {
			t.Errorf("the hold of all 3 permits was not kept: %v", err)
		}
		if err := p.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// TestPermitsLine: the line is first come, first served with mixed n: a
// waiter for more permits than are free keeps the later, smaller ones
// behind it (the free permits stay free), and a release gives the permits
// it frees to every waiter at the head that fits, in order. Waiters of
// three clients; each step is checked in Redis (Inspect) once the release
// that makes it has returned: the grants are made by the release itself.
func TestPermitsLine(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		ctx := ctxTimeout(t, 60*time.Second)
		addr := testenv.RedisAddr(t)
		cs := []*lock.Client{newClient(t, r, prefix), newClient(t, a.dial(t, addr), prefix), newClient(t, a.dial(t, addr), prefix)}
		const name, permits = "line-n", 4
		acquireN := func(i, n int) <-chan acquired {
			return lockAsync(func() (*lock.Lock, error) { return cs[i%3].Semaphore(name, permits).AcquireN(ctx, n) })
		}
		// state checks the holds (their numbers of permits, by token) and
		// the waiters in Redis
		state := func(step string, waiters int, permitsOf ...int) {
			t.Helper()
			st, err := cs[0].Inspect(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			var got []int
			for _, h := range st.Holds {
				got = append(got, len(h.Slots))
			}
			if !slices.Equal(got, permitsOf) || st.Waiters != waiters {
				t.Fatalf("%s: holds of %v permits and %d waiters, want %v and %d (%+v)", step, got, st.Waiters, permitsOf, waiters, st)
			}
		}
		h, err := cs[0].Semaphore(name, permits).TryAcquireN(ctx, 3)
		if err != nil {
			t.Fatal(err)
		}
		wantA := acquireN(1, 2) // 1 free: waits
		waitInLine(t, cs[0], name, 1)
		wantB := acquireN(2, 1) // 1 free, but A is ahead: waits
		waitInLine(t, cs[0], name, 2)
		state("B behind A", 2, 3)
		if _, err := cs[0].Semaphore(name, permits).TryAcquire(ctx); !errors.Is(err, lock.ErrNotObtained) {
			t.Errorf("TryAcquire while A and B wait: %v, want ErrNotObtained", err)
		}
		if err := h.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		state("the release of 3", 0, 2, 1) // A then B, in that order
		la, lb := (<-wantA).must(t), (<-wantB).must(t)
		if len(la.Slots()) != 2 || len(lb.Slots()) != 1 || slices.Contains(la.Slots(), lb.Slot()) || lb.Token() <= la.Token() {
			t.Errorf("A: slots %v token %d; B: slots %v token %d", la.Slots(), la.Token(), lb.Slots(), lb.Token())
		}

		wantC := acquireN(0, 4) // 1 free: waits
		waitInLine(t, cs[0], name, 1)
		wantD := acquireN(1, 1) // 1 free, but C is ahead: waits
		waitInLine(t, cs[0], name, 2)
		if err := la.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		state("the release of A: 3 free, C needs 4, D waits behind C", 2, 1)
		if err := lb.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		state("the release of B: C gets all 4", 1, 4)
		lc := (<-wantC).must(t)
		if got := lc.Slots(); !slices.Equal(got, []int{0, 1, 2, 3}) {
			t.Errorf("C's slots %v", got)
		}
		if err := lc.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		state("the release of C: D", 0, 1)
		ld := (<-wantD).must(t)
		if err := ld.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		state("the end", 0)
	})
}

// TestPermitsPausedWaiter is TestPausedWaiterGrant for a waiter of 2
// permits of 3: the grant of both slots reaches it after its lease ran out
// and another client took them. Whenever AcquireN returns, Redis must hold
// both of its slots for it, and for at least its ValidUntil.
func TestPermitsPausedWaiter(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		rdb := rawClient(t, testenv.RedisAddr(t))
		var wg sync.WaitGroup
		for _, lease := range []string{"ttl", "watchdog"} {
			for _, order := range []string{"poll first", "both ready"} {
				p := newPauser(order == "both ready")
				p.Redis = a.dial(t, testenv.RedisAddr(t))
				others, waiter := newClient(t, r, prefix), newClient(t, p, prefix)
				name := "paused-n-" + lease + "-" + order
				wg.Go(func() {
					if err := pausedN(rdb, prefix, name, lease, others, waiter, p); err != nil {
						t.Errorf("%s, %s: %v", lease, order, err)
					}
				})
			}
		}
		wg.Wait()
	})
}

// pausedN is one case of TestPermitsPausedWaiter (see pausedCase.run).
func pausedN(rdb *redis.Client, prefix, name, leaseKind string, others, waiter *lock.Client, p *pauser) error {
	const lease = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	opt := lock.WithTTL(lease)
	if leaseKind == "watchdog" {
		opt = lock.WithWatchdog(lease)
	}
	long := lock.WithTTL(30 * time.Second)
	sem := func(c *lock.Client) *lock.Semaphore { return c.Semaphore(name, 3) }
	holder, err := sem(others).TryAcquireN(ctx, 2, long)
	if err != nil {
		return err
	}
	rest, err := sem(others).TryAcquire(ctx, long) // held throughout
	if err != nil {
		return err
	}
	defer rest.Unlock(ctx)

	released := make(chan error, 1)
	p.arm(func(time.Time) { released <- holder.Unlock(ctx) })
	type outcome struct {
		l       *lock.Lock
		err     error
		problem string
	}
	done := make(chan outcome, 1)
	go func() {
		l, err := sem(waiter).AcquireN(ctx, 2, opt)
		o := outcome{l: l, err: err}
		if err == nil {
			o.problem = checkHeld(ctx, rdb, prefix, name, l)
		}
		done <- o
	}()
	defer func() {
		p.resume()
		cancel()
	}()
	wait := func(ch <-chan struct{}, what string) error {
		select {
		case <-ch:
			return nil
		case o := <-done:
			return fmt.Errorf("the waiter returned before %s: %+v", what, o)
		case <-time.After(20 * time.Second):
			return fmt.Errorf("timed out waiting for %s", what)
		}
	}
	if err := wait(p.paused, "pausing"); err != nil {
		return err
	}
	if err := <-released; err != nil {
		return fmt.Errorf("release to the waiter: %w", err)
	}
	if err := wait(p.got, "the grant's message"); err != nil {
		return err
	}
	var next *lock.Lock
	for deadline := time.Now().Add(2*lease + 10*time.Second); ; time.Sleep(5 * time.Millisecond) {
		next, err = sem(others).TryAcquireN(ctx, 2, long)
		if err == nil {
			break
		}
		if !errors.Is(err, lock.ErrNotObtained) || time.Now().After(deadline) {
			return fmt.Errorf("taking the 2 permits once the grant's lease ran out: %w", err)
		}
	}
	o, returned, err := resume(ctx, p, done, next, "the permits")
	if err != nil {
		return err
	}
	if o.err != nil {
		return fmt.Errorf("the waiter: %w", o.err)
	}
	defer o.l.Unlock(ctx)
	if o.problem != "" {
		return fmt.Errorf("returned (while the next holder held the permits: %v): %s", returned, o.problem)
	}
	return nil
}

// fenceSlots is the protected resource of TestPermitsUnderPauses: one
// fence per slot (lock.FenceLua); an access claims the fence of each of
// the holder's slots with its token, and tells which refused it.
var fenceSlots = redis.NewScript(lock.FenceLua + `
local out = {}
for i, k in ipairs(KEYS) do
	out[i] = fence(k, ARGV[1]) and 1 or 0
end
return out`)

// ledger is the direct count of TestPermitsUnderPauses: the holds that
// the holders believe valid (returned, not yet unlocked, ValidUntil not
// passed), checked against one another as each enters, and against Redis
// by a sampler.
type ledger struct {
	t       testing.TB
	permits int
	mu      sync.Mutex
	in      map[*lock.Lock]entered
	// counts
	entries, takeovers, samples, checked int
}

type entered struct {
	at, valid time.Time
	slots     []int
	taken     bool // a later hold took one of its slots (its validity had passed)
}

func newLedger(t testing.TB, permits int) *ledger {
	return &ledger{t: t, permits: permits, in: map[*lock.Lock]entered{}}
}

// enter records l, just returned and its slots claimed at the resource:
// with every other hold still valid, it must make at most permits, with no
// slot twice.
func (g *ledger) enter(l *lock.Lock) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	e := entered{at: now, valid: l.ValidUntil(), slots: l.Slots()}
	if !now.Before(e.valid) {
		return // valid no longer: claims nothing
	}
	g.entries++
	sum := len(e.slots)
	for o, oe := range g.in {
		shared := slices.ContainsFunc(oe.slots, func(s int) bool { return slices.Contains(e.slots, s) })
		if !now.Before(oe.valid) {
			if shared {
				oe.taken = true
				g.in[o] = oe
				g.takeovers++
			}
			continue
		}
		if shared {
			g.t.Errorf("token %d, slots %v: token %d, valid for %v more, holds slots %v", l.Token(), e.slots, o.Token(), oe.valid.Sub(now), oe.slots)
		}
		sum += len(oe.slots)
	}
	if sum > g.permits {
		g.t.Errorf("token %d enters: %d permits held by valid holders, of %d", l.Token(), sum, g.permits)
	}
	g.in[l] = e
}

// exit forgets l (before its Unlock), and reports whether a later hold
// took one of its slots.
func (g *ledger) exit(l *lock.Lock) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	taken := g.in[l].taken
	delete(g.in, l)
	return taken
}

// takenOver reports whether a later hold took one of l's slots.
func (g *ledger) takenOver(l *lock.Lock) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.in[l].taken
}

// sample reads the semaphore in Redis: its live holds make at most permits
// with no slot twice, and every hold valid throughout the read (entered
// before it was sent, valid after its answer) is there, with its slots.
func (g *ledger) sample(ctx context.Context, rdb *redis.Client, prefix, name string) error {
	sent := time.Now()
	holds, err := redisHolds(ctx, rdb, prefix, name)
	if err != nil {
		return err
	}
	recv := time.Now()
	used := map[int]int64{}
	sum := 0
	byToken := map[int64]redisHold{}
	for _, h := range holds {
		for _, s := range h.slots {
			if tok, ok := used[s]; ok {
				g.t.Errorf("Redis: slot %d held by tokens %d and %d", s, tok, h.token)
			}
			used[s] = h.token
		}
		sum += len(h.slots)
		byToken[h.token] = h
	}
	if sum > g.permits {
		g.t.Errorf("Redis: %d permits held, of %d: %+v", sum, g.permits, holds)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.samples++
	for l, e := range g.in {
		if !e.at.Before(sent) || !recv.Before(e.valid) {
			continue
		}
		g.checked++
		if h, ok := byToken[l.Token()]; !ok || !slices.Equal(h.slots, e.slots) {
			g.t.Errorf("token %d, slots %v, valid for %v more: Redis holds %+v", l.Token(), e.slots, e.valid.Sub(recv), holds)
		}
	}
	return nil
}

// TestPermitsUnderPauses is the direct count of holds of 1 to 3 permits
// of 5: four clients (each a process that can be frozen as Redis sees it:
// see freezable) of two goroutines each take holds under a watchdog or a
// fixed lease (1 s) and claim their slots at a fenced resource (one fence
// per slot). Once per client, a holder freezes its whole client past its
// lease, until Redis no longer has its hold and a later hold took one of
// its slots, and then writes to the resource anyway. Throughout, a
// sampler reads the semaphore in Redis. Checked: the holds Redis has make
// at most 5 permits, no slot twice; every holder that believes its hold
// valid is in Redis with its slots (so the valid holders make at most 5
// permits, no slot twice, which the ledger also checks as each enters);
// a valid holder's claim is never refused; the frozen holder's context
// ends with ErrLost, its late write is refused on a slot taken over, and
// its Unlock returns ErrNotHeld. One hold in four is given back by the
// next client with Semaphore.Release of its ID instead of Unlock: that
// finds every hold still valid, and its holder's context ends with ErrLost.
func TestPermitsUnderPauses(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, _ lock.Redis, prefix string) {
		const permits, clients, perClient, rounds = 5, 4, 2, 8
		const lease = time.Second
		const name = "pauses-n"
		addr := testenv.RedisAddr(t)
		ctx := ctxTimeout(t, 3*time.Minute)
		rdb := rawClient(t, addr)
		g := newLedger(t, permits)
		procs := make([]*freezable, clients)
		cls := make([]*lock.Client, clients)
		for i := range clients {
			procs[i] = &freezable{Redis: a.dial(t, addr)}
			cls[i] = newClient(t, procs[i], prefix)
		}
		fences := func(slots []int) []string {
			keys := make([]string, len(slots))
			for i, s := range slots {
				keys[i] = prefix + "res:fence:" + strconv.Itoa(s)
			}
			return keys
		}
		// claim accesses the resource with l's token on each of its slots,
		// and returns how many refused it
		claim := func(l *lock.Lock) (int, error) {
			r, err := fenceSlots.Run(ctx, rdb, fences(l.Slots()), l.Token()).Int64Slice()
			refused := 0
			for _, v := range r {
				if v == 0 {
					refused++
				}
			}
			return refused, err
		}

		stop := make(chan struct{})
		sampled := make(chan struct{})
		go func() {
			defer close(sampled)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := g.sample(ctx, rdb, prefix, name); err != nil && ctx.Err() == nil {
					t.Errorf("sampling Redis: %v", err)
					return
				}
				time.Sleep(time.Millisecond)
			}
		}()

		var (
			mu   sync.Mutex
			byID []*lock.Lock // holds released by another client
		)
		var frozen, lateRefused, lateWrites atomic.Int32
		var pending atomic.Int32 // freezes still to come: everyone takes holds until they are done
		pending.Store(clients)
		var wg sync.WaitGroup
		for c := range clients {
			for k := range perClient {
				id := c*perClient + k
				sem := cls[c].Semaphore(name, permits)
				wg.Go(func() {
					for i := 0; i < rounds || pending.Load() > 0; i++ {
						n := 1 + (id+i)%3
						opt := lock.WithWatchdog(lease)
						if id%2 == 1 {
							opt = lock.WithTTL(lease)
						}
						l, err := sem.AcquireN(ctx, n, opt)
						if err != nil {
							t.Error(err)
							return
						}
						refused, err := claim(l)
						if err != nil {
							t.Error(err)
							return
						}
						if refused > 0 && time.Now().Before(l.ValidUntil()) {
							t.Errorf("token %d, slots %v, valid for %v more: the resource refused it on %d slots",
								l.Token(), l.Slots(), time.Until(l.ValidUntil()), refused)
						}
						g.enter(l)
						if k == 0 && i == c+1 {
							frozen.Add(1)
							thaw := procs[c].freeze()
							deadline := time.Now().Add(20 * time.Second)
							for time.Now().Before(deadline) {
								holds, err := redisHolds(ctx, rdb, prefix, name)
								if err == nil && !slices.ContainsFunc(holds, func(h redisHold) bool { return h.token == l.Token() }) &&
									g.takenOver(l) {
									break
								}
								time.Sleep(5 * time.Millisecond)
							}
							thaw()
							select {
							case <-l.Done():
							case <-time.After(20 * time.Second):
								t.Errorf("token %d: frozen past its lease, and its context did not end", l.Token())
							}
							if cause := context.Cause(l.Context()); !errors.Is(cause, lock.ErrLost) {
								t.Errorf("frozen holder's cause %v, want ErrLost", cause)
							}
							refused, err := claim(l) // the late write
							if err != nil {
								t.Error(err)
							}
							lateWrites.Add(1)
							if refused > 0 {
								lateRefused.Add(1)
							}
							if g.exit(l) && refused == 0 {
								t.Errorf("token %d, slots %v: a later hold took a slot, and the late write was accepted", l.Token(), l.Slots())
							}
							if err := l.Unlock(ctx); !errors.Is(err, lock.ErrNotHeld) {
								t.Errorf("Unlock of the frozen hold: %v, want ErrNotHeld", err)
							}
							pending.Add(-1)
							continue
						}
						time.Sleep(time.Millisecond)
						g.exit(l)
						if (id+i)%4 == 3 {
							// given back by the next client, by its ID
							valid := l.ValidUntil()
							err := cls[(c+1)%clients].Semaphore(name, permits).Release(ctx, l.ID())
							switch {
							case err == nil:
								mu.Lock()
								byID = append(byID, l)
								mu.Unlock()
							case !errors.Is(err, lock.ErrNotHeld):
								t.Error(err)
							case time.Now().Before(valid):
								t.Errorf("token %d, valid for %v more: Release of its ID found no hold", l.Token(), time.Until(valid))
							}
							continue
						}
						// nil, or ErrNotHeld: a hold that a frozen client (this
						// one's) or a stalled machine let expire; or a release
						// whose answer a stalled machine did not read in time
						// (the client's timeout): then the lease ends the hold,
						// and the sampler sees to it that nothing breaks meanwhile
						var ne net.Error
						if err := l.Unlock(ctx); err != nil && !errors.Is(err, lock.ErrNotHeld) &&
							!(errors.As(err, &ne) && ne.Timeout()) {
							t.Error(err)
						}
					}
				})
			}
		}
		wg.Wait()
		close(stop)
		<-sampled
		// the holders of the holds released by ID learn it
		for _, l := range byID {
			select {
			case <-l.Done():
			case <-time.After(20 * time.Second):
				t.Fatalf("token %d, released by ID: its context did not end", l.Token())
			}
			if cause := context.Cause(l.Context()); !errors.Is(cause, lock.ErrLost) {
				t.Errorf("token %d, released by ID: cause %v, want ErrLost", l.Token(), cause)
			}
			if err := l.Unlock(ctx); !errors.Is(err, lock.ErrNotHeld) {
				t.Errorf("token %d, released by ID: Unlock %v, want ErrNotHeld", l.Token(), err)
			}
		}
		t.Logf("%d holds of 1-3 permits of %d entered, %d released by ID from another client, %d frozen past their lease, "+
			"%d of their slots' takeovers seen, %d of %d late writes refused; %d Redis samples checked %d valid holds",
			g.entries, permits, len(byID), frozen.Load(), g.takeovers, lateRefused.Load(), lateWrites.Load(), g.samples, g.checked)
		if frozen.Load() != clients || g.takeovers == 0 || lateRefused.Load() == 0 || g.checked == 0 || len(byID) == 0 {
			t.Errorf("the pauses did not overlap holders: %d frozen, %d takeovers, %d late writes refused, %d checks",
				frozen.Load(), g.takeovers, lateRefused.Load(), g.checked)
		}
	})
}
