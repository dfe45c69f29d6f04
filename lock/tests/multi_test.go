package tests

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/lock"
)

// TestMultiLock: all or none (a TryLock or a Lock that fails holds none of
// its names, as Redis shows), the global order (a multi-lock given "b",
// "a" waits for a holding nothing), names of one key counted once, the
// hold's tokens and validity, its context ending when a part is lost, and a
// Lock that starts over when a part it holds is lost while it waits.
func TestMultiLock(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		ctx := ctxTimeout(t, 2*time.Minute)
		c := newClient(t, r, prefix)
		other := newClient(t, r, prefix)
		raw := rawClient(t, testenv.RedisAddr(t))
		held := func(t *testing.T, names ...string) []bool {
			t.Helper()
			var out []bool
			for _, n := range names {
				v, err := raw.Exists(ctx, prefix+"{"+n+"}").Result()
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, v == 1)
			}
			return out
		}
		token := func(t *testing.T, name string) int64 {
			t.Helper()
			st, err := other.Inspect(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			if len(st.Holds) != 1 {
				return 0
			}
			return st.Holds[0].Token
		}

		t.Run("try", func(t *testing.T) {
			blocker, err := other.TryLock(ctx, "t-c")
			if err != nil {
				t.Fatal(err)
			}
			m := c.MultiLock("t-d", "t-a", "t-c", "t-b")
			if got, want := m.Names(), []string{"t-a", "t-b", "t-c", "t-d"}; !slices.Equal(got, want) {
				t.Errorf("names %v, want %v", got, want)
			}
			_, err = m.TryLock(ctx)
			if !errors.Is(err, lock.ErrNotObtained) || !strings.Contains(err.Error(), `"t-c"`) {
				t.Errorf("TryLock with t-c taken: %v", err)
			}
			if got := held(t, "t-a", "t-b", "t-c", "t-d"); !slices.Equal(got, []bool{false, false, true, false}) {
				t.Errorf("after the failed TryLock, held in Redis (a, b, c, d): %v", got)
			}
			if err := blocker.Unlock(ctx); err != nil {
				t.Fatal(err)
			}

			h, err := m.TryLock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			tokens := h.Tokens()
			first := time.Time{}
			for i, l := range h.Locks() {
				if l.Key() != m.Names()[i] {
					t.Errorf("part %d is %s, want %s", i, l.Key(), m.Names()[i])
				}
				if got := token(t, l.Key()); got != tokens[l.Key()] || got != l.Token() {
					t.Errorf("%s: Redis holds token %d, the hold says %d (part: %d)", l.Key(), got, tokens[l.Key()], l.Token())
				}
				if v := l.ValidUntil(); i == 0 || v.Before(first) {
					first = v
				}
			}
			if !h.ValidUntil().Equal(first) {
				t.Errorf("ValidUntil %v, the earliest part's %v", h.ValidUntil(), first)
			}
			if err := h.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if got := held(t, "t-a", "t-b", "t-c", "t-d"); slices.Contains(got, true) {
				t.Errorf("after Unlock, held in Redis: %v", got)
			}
			if err := h.Unlock(ctx); !errors.Is(err, lock.ErrNotHeld) {
				t.Errorf("second Unlock: %v", err)
			}
			if h.Context().Err() == nil || !h.ValidUntil().IsZero() {
				t.Errorf("after Unlock: context %v, ValidUntil %v", h.Context().Err(), h.ValidUntil())
			}
		})

		t.Run("one key once", func(t *testing.T) {
			m := c.MultiLock("o-a", "{o-a}", "o-a")
			if n := len(m.Names()); n != 1 {
				t.Fatalf("names %v", m.Names())
			}
			h, err := m.TryLock(ctx)
			if err != nil {
				t.Fatalf("a multi-lock of one key twice: %v", err)
			}
			if err := h.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := c.MultiLock().TryLock(ctx); !errors.Is(err, lock.ErrOption) {
				t.Errorf("no names: %v", err)
			}
		})

		t.Run("wait fails", func(t *testing.T) {
			blocker, err := other.TryLock(ctx, "w-c")
			if err != nil {
				t.Fatal(err)
			}
			defer blocker.Unlock(ctx)
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			ch := lockAsync(func() (*lock.Lock, error) {
				_, err := c.MultiLock("w-d", "w-c", "w-b", "w-a").Lock(wctx)
				return nil, err
			})
			waitInLine(t, other, "w-c", 1)
			if got := held(t, "w-a", "w-b", "w-d"); !slices.Equal(got, []bool{true, true, false}) {
				t.Errorf("waiting for w-c, held in Redis (a, b, d): %v", got)
			}
			cancel()
			res := <-ch
			if !errors.Is(res.err, lock.ErrNotObtained) || !errors.Is(res.err, context.Canceled) {
				t.Errorf("Lock: %v", res.err)
			}
			if got := held(t, "w-a", "w-b", "w-c", "w-d"); !slices.Equal(got, []bool{false, false, true, false}) {
				t.Errorf("after the failed Lock, held in Redis (a, b, c, d): %v", got)
			}
		})

		t.Run("order", func(t *testing.T) {
			blocker, err := other.TryLock(ctx, "r-a")
			if err != nil {
				t.Fatal(err)
			}
			var h *lock.MultiHold
			ch := lockAsync(func() (*lock.Lock, error) {
				var err error
				h, err = c.MultiLock("r-b", "r-a").Lock(ctx)
				return nil, err
			})
			waitInLine(t, other, "r-a", 1)
			if got := held(t, "r-b"); got[0] {
				t.Error("waiting for r-a, the multi-lock took r-b first: its order is not the keys'")
			}
			if err := blocker.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if res := <-ch; res.err != nil {
				t.Fatal(res.err)
			}
			if got := held(t, "r-a", "r-b"); !slices.Equal(got, []bool{true, true}) {
				t.Errorf("held in Redis: %v", got)
			}
			if err := h.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		})

		t.Run("lost", func(t *testing.T) {
			const lease = 300 * time.Millisecond // renewed, and refused, within 100 ms
			h, err := c.MultiLock("l-a", "l-b").TryLock(ctx, lock.WithWatchdog(lease))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := other.ForceUnlock(ctx, "l-b"); err != nil {
				t.Fatal(err)
			}
			select {
			case <-h.Done():
			case <-time.After(20 * time.Second):
				t.Fatal("the hold's context did not end within 20 s of the loss of a part")
			}
			cause := context.Cause(h.Context())
			if !errors.Is(cause, lock.ErrLost) || !strings.Contains(cause.Error(), `"l-b"`) {
				t.Errorf("cause %v", cause)
			}
			if !h.ValidUntil().IsZero() {
				t.Errorf("ValidUntil %v once a part was lost", h.ValidUntil())
			}
			err = h.Unlock(ctx)
			if !errors.Is(err, lock.ErrNotHeld) || strings.Contains(err.Error(), `"l-a"`) {
				t.Errorf("Unlock: %v", err)
			}
			if got := held(t, "l-a", "l-b"); slices.Contains(got, true) {
				t.Errorf("after Unlock, held in Redis: %v", got)
			}
		})

		t.Run("part lost while waiting", func(t *testing.T) {
			const lease = 300 * time.Millisecond
			blocker, err := other.TryLock(ctx, "p-b")
			if err != nil {
				t.Fatal(err)
			}
			var h *lock.MultiHold
			ch := lockAsync(func() (*lock.Lock, error) {
				var err error
				h, err = c.MultiLock("p-a", "p-b").Lock(ctx, lock.WithWatchdog(lease))
				return nil, err
			})
			waitInLine(t, other, "p-b", 1)
			before := token(t, "p-a")
			if before == 0 {
				t.Fatal("waiting for p-b, p-a is not held")
			}
			if _, err := other.ForceUnlock(ctx, "p-a"); err != nil {
				t.Fatal(err)
			}
			// the part is lost at its next renewal: Lock starts over, takes
			// p-a again and waits for p-b
			waitFor(t, 20*time.Second, "p-a taken again", func() bool {
				st, err := other.Inspect(ctx, "p-a")
				return err == nil && len(st.Holds) == 1 && st.Holds[0].Token > before
			})
			waitInLine(t, other, "p-b", 1)
			if err := blocker.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if res := <-ch; res.err != nil {
				t.Fatal(res.err)
			}
			defer h.Unlock(ctx)
			if err := h.Context().Err(); err != nil {
				t.Errorf("the hold returned has ended: %v", context.Cause(h.Context()))
			}
			for name, tok := range h.Tokens() {
				if got := token(t, name); got != tok {
					t.Errorf("%s: the hold has token %d, Redis %d", name, tok, got)
				}
			}
		})

		t.Run("Do", func(t *testing.T) {
			const lease = 300 * time.Millisecond
			var cause error
			err := c.MultiLock("d-a", "d-b").Do(ctx, func(fctx context.Context) error {
				if got := held(t, "d-a", "d-b"); slices.Contains(got, false) {
					t.Errorf("in fn, held in Redis: %v", got)
				}
				if _, err := other.ForceUnlock(ctx, "d-a"); err != nil {
					return err
				}
				select {
				case <-fctx.Done():
					cause = context.Cause(fctx)
				case <-time.After(20 * time.Second):
					t.Error("fn's context did not end within 20 s of the loss of a part")
				}
				return nil
			}, lock.WithWatchdog(lease))
			if !errors.Is(cause, lock.ErrLost) || !errors.Is(err, lock.ErrLost) {
				t.Errorf("fn's context ended with %v; Do: %v", cause, err)
			}
			if got := held(t, "d-a", "d-b"); slices.Contains(got, true) {
				t.Errorf("after Do, held in Redis: %v", got)
			}
		})
	})
}

// TestMultiLockNoDeadlock: goroutines of several clients take overlapping
// sets of names, each given in a random order, with Lock (the defaults:
// cohorts within a client) and TryLock, and all of them finish; no two hold
// a name at once.
func TestMultiLockNoDeadlock(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		const clients, goroutines, rounds = 3, 3, 15
		pool := []string{"n0", "n1", "n2", "n3"}
		ctx := ctxTimeout(t, 3*time.Minute)
		var inside [4]atomic.Int32
		var taken, tried atomic.Int32
		var wg sync.WaitGroup
		for range clients {
			c := newClient(t, a.dial(t, testenv.RedisAddr(t)), prefix)
			for range goroutines {
				wg.Go(func() {
					for i := range rounds {
						names := slices.Clone(pool)
						rand.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
						names = names[:2+rand.IntN(3)]
						m := c.MultiLock(names...)
						var h *lock.MultiHold
						var err error
						if i%4 == 3 {
							tried.Add(1)
							if h, err = m.TryLock(ctx); errors.Is(err, lock.ErrNotObtained) {
								continue
							}
						} else {
							h, err = m.Lock(ctx)
						}
						if err != nil {
							t.Error(err)
							return
						}
						taken.Add(1)
						for _, n := range names {
							if k := inside[n[1]-'0'].Add(1); k != 1 {
								t.Errorf("%s held %d times at once", n, k)
							}
						}
						time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
						for _, n := range names {
							inside[n[1]-'0'].Add(-1)
						}
						if err := h.Unlock(ctx); err != nil {
							t.Error(err)
						}
					}
				})
			}
		}
		wg.Wait()
		t.Logf("%d multi-locks held (%d TryLock attempts)", taken.Load(), tried.Load())
	})
}

// TestMultiLockPaused counts holders directly under pauses. Clients (one
// lock.Client each, on a connection of its own, as processes would have)
// take multi-locks over overlapping sets of names given in random orders;
// now and then a holder's process pauses past its lease (its Redis calls
// stop: its watchdog cannot renew) until another holder took one of its
// names, and then goes on. Whenever a multi-lock is returned, and all along
// from a monitor that reads the keys, the test checks, per name, that at
// most one registered holder believes its hold valid (the multi-lock's
// ValidUntil, which a holder goes by), and that Redis holds the token of the
// one that does.
func TestMultiLockPaused(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		const clients, goroutines, rounds = 3, 2, 10
		const lease = 400 * time.Millisecond
		pool := []string{"q0", "q1", "q2", "q3", "q4"}
		addr := testenv.RedisAddr(t)
		raw := rawClient(t, addr)
		ctx := ctxTimeout(t, 3*time.Minute)
		reg := &multiRegister{raw: raw, prefix: prefix, in: map[*lock.Lock]holder{}, entered: map[string]int{}}
		var pauses, takeovers atomic.Int32
		var wg sync.WaitGroup
		for ci := range clients {
			f := &freezer{Redis: a.dial(t, addr)}
			c := newClient(t, f, prefix)
			// the last client's holds have a fixed lease: its holders stall
			// past it without stopping the process (nothing to renew)
			opt := lock.WithWatchdog(lease)
			if ci == clients-1 {
				opt = lock.WithTTL(2 * lease)
			}
			for gi := range goroutines {
				who := fmt.Sprintf("%d.%d", ci, gi)
				wg.Go(func() {
					for i := range rounds {
						names := slices.Clone(pool)
						rand.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
						names = names[:2+rand.IntN(2)]
						h, err := c.MultiLock(names...).Lock(ctx, opt)
						if err != nil {
							t.Errorf("%s: %v", who, err)
							return
						}
						seen := reg.enter(ctx, who, h)
						if i%5 == (ci*goroutines+gi)%5 {
							pauses.Add(1)
							if ci != clients-1 {
								f.freeze()
							}
							time.Sleep(time.Until(h.ValidUntil()))
							for deadline := time.Now().Add(3 * time.Second); !reg.since(seen) && time.Now().Before(deadline); {
								time.Sleep(time.Millisecond)
							}
							if reg.since(seen) {
								takeovers.Add(1)
							}
							f.thaw()
						} else {
							time.Sleep(time.Duration(1+rand.IntN(2000)) * time.Microsecond)
						}
						reg.exit(h)
						_ = h.Unlock(ctx) // ErrNotHeld after a pause
					}
				})
			}
		}
		done := make(chan struct{})
		var mon sync.WaitGroup
		mon.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				reg.monitor(ctx)
				time.Sleep(time.Millisecond)
			}
		})
		wg.Wait()
		close(done)
		mon.Wait()
		reg.mu.Lock()
		defer reg.mu.Unlock()
		t.Logf("%d multi-locks, %d monitor reads, %d pauses, %d of them taken over", reg.entries, reg.reads, pauses.Load(), takeovers.Load())
		for _, p := range reg.problems {
			t.Error(p)
		}
		if reg.entries != clients*goroutines*rounds {
			t.Errorf("%d multi-locks, want %d", reg.entries, clients*goroutines*rounds)
		}
		if takeovers.Load() == 0 {
			t.Error("no paused holder's name was taken over: the pauses overlapped no holders")
		}
	})
}

// multiRegister is the holders of the names as they see themselves: every
// part of every multi-lock held, with its multi-lock, valid while that is
// (MultiHold.ValidUntil).
type multiRegister struct {
	raw    *redis.Client
	prefix string

	mu       sync.Mutex
	in       map[*lock.Lock]holder
	entered  map[string]int // holds entered, per name
	entries  int
	reads    int
	problems []string
}

// enter records h, just returned to who, checks it against the holders
// recorded and against Redis, and returns how many holds had entered each
// of its names (for since).
func (g *multiRegister) enter(ctx context.Context, who string, h *lock.MultiHold) map[string]int {
	parts := h.Locks()
	g.mu.Lock()
	now := time.Now()
	seen := map[string]int{}
	for _, p := range parts {
		name := p.Key()
		for o, other := range g.in {
			if theirs, mine := other.h.ValidUntil(), h.ValidUntil(); o.Key() == name && now.Before(theirs) && now.Before(mine) {
				g.note("%s: %s got token %d (valid for %v more) while %s held token %d (valid for %v more)",
					name, who, p.Token(), mine.Sub(now), other.who, o.Token(), theirs.Sub(now))
			}
		}
		g.in[p] = holder{who, h}
		g.entered[name]++
		seen[name] = g.entered[name]
	}
	g.entries++
	g.mu.Unlock()

	vals := g.read(ctx, parts)
	after := time.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	if after.Before(h.ValidUntil()) {
		for i, p := range parts {
			g.inRedis(who, h, p, vals[i])
		}
	}
	return seen
}

// since reports whether another hold entered one of the names since seen.
func (g *multiRegister) since(seen map[string]int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for name, n := range seen {
		if g.entered[name] > n {
			return true
		}
	}
	return false
}

// exit takes h out of the register, before its Unlock.
func (g *multiRegister) exit(h *lock.MultiHold) {
	g.mu.Lock()
	for _, p := range h.Locks() {
		delete(g.in, p)
	}
	g.mu.Unlock()
}

// monitor reads the keys of the registered holds once, and checks those
// registered and valid all along the read: Redis must hold their tokens,
// and no two of one name may be valid at once.
func (g *multiRegister) monitor(ctx context.Context) {
	g.mu.Lock()
	var parts []*lock.Lock
	now := time.Now()
	for p, o := range g.in {
		if now.Before(o.h.ValidUntil()) {
			parts = append(parts, p)
		}
	}
	g.mu.Unlock()
	if len(parts) == 0 {
		return
	}
	vals := g.read(ctx, parts)
	after := time.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.reads++
	valid := map[string]int{}
	for i, p := range parts {
		o, ok := g.in[p]
		if !ok || !after.Before(o.h.ValidUntil()) {
			continue
		}
		valid[p.Key()]++
		g.inRedis(o.who, o.h, p, vals[i])
	}
	for name, n := range valid {
		if n > 1 {
			g.note("%s: %d holders valid at once", name, n)
		}
	}
}

// read returns the value of each part's key in Redis.
func (g *multiRegister) read(ctx context.Context, parts []*lock.Lock) []string {
	pipe := g.raw.Pipeline()
	cmds := make([]*redis.StringCmd, len(parts))
	for i, p := range parts {
		cmds[i] = pipe.Get(ctx, g.prefix+"{"+p.Key()+"}")
	}
	_, _ = pipe.Exec(ctx)
	vals := make([]string, len(parts))
	for i, c := range cmds {
		vals[i] = c.Val()
	}
	return vals
}

// inRedis checks that v, the value of p's key read while h was valid, is
// p's hold: "<hold token> <fencing token>[ <streak>]", where a hold passed
// on in-process has a token of the 17 that Redis reserved. g.mu is held.
func (g *multiRegister) inRedis(who string, h *lock.MultiHold, p *lock.Lock, v string) {
	f := strings.Fields(v)
	var token int64
	if len(f) >= 2 {
		token, _ = strconv.ParseInt(f[1], 10, 64)
	}
	if token == 0 || p.Token() < token || p.Token() >= token+17 {
		g.note("%s: %s holds token %d, valid for %v more: Redis holds %q", p.Key(), who, p.Token(), time.Until(h.ValidUntil()), v)
	}
}

// holder is who holds a part, and the multi-lock it is a part of.
type holder struct {
	who string
	h   *lock.MultiHold
}

// note keeps the first problems. g.mu is held.
func (g *multiRegister) note(format string, args ...any) {
	if len(g.problems) < 10 {
		g.problems = append(g.problems, fmt.Sprintf(format, args...))
	}
}

// freezer stands for a process that pauses: while frozen, none of its Redis
// calls is sent (those under way finish); they wait until it thaws, or
// fail when their context ends first. Messages still arrive, to be handled
// after the thaw as a paused process would find them.
type freezer struct {
	lock.Redis
	mu     sync.Mutex
	thawed chan struct{} // nil unless frozen; closed by thaw
}

func (f *freezer) freeze() {
	f.mu.Lock()
	if f.thawed == nil {
		f.thawed = make(chan struct{})
	}
	f.mu.Unlock()
}

func (f *freezer) thaw() {
	f.mu.Lock()
	if f.thawed != nil {
		close(f.thawed)
		f.thawed = nil
	}
	f.mu.Unlock()
}

func (f *freezer) wait(ctx context.Context) error {
	f.mu.Lock()
	ch := f.thawed
	f.mu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *freezer) EvalSHA(ctx context.Context, sha string, keys, args []string) (int64, error) {
	if err := f.wait(ctx); err != nil {
		return 0, err
	}
	return f.Redis.EvalSHA(ctx, sha, keys, args)
}

func (f *freezer) Eval(ctx context.Context, src string, keys, args []string) (int64, error) {
	if err := f.wait(ctx); err != nil {
		return 0, err
	}
	return f.Redis.Eval(ctx, src, keys, args)
}

func (f *freezer) EvalSHAStrings(ctx context.Context, sha string, keys, args []string) ([]string, error) {
	if err := f.wait(ctx); err != nil {
		return nil, err
	}
	return f.Redis.EvalSHAStrings(ctx, sha, keys, args)
}

func (f *freezer) EvalStrings(ctx context.Context, src string, keys, args []string) ([]string, error) {
	if err := f.wait(ctx); err != nil {
		return nil, err
	}
	return f.Redis.EvalStrings(ctx, src, keys, args)
}
