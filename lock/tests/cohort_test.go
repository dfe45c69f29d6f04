package tests

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/lock"
)

// holds records the holds of one lock name in the order they happened and
// fails the test when two overlap.
type holds struct {
	t      *testing.T
	inside atomic.Int32
	mu     sync.Mutex
	tokens []int64
	who    []string
}

// run is the critical section of a hold by who: it checks that nobody else
// is inside and records the token.
func (h *holds) run(who string, l *lock.Lock, d time.Duration) {
	if n := h.inside.Add(1); n != 1 {
		h.t.Errorf("%d holders at once", n)
	}
	h.mu.Lock()
	h.tokens = append(h.tokens, l.Token())
	h.who = append(h.who, who)
	h.mu.Unlock()
	if d > 0 {
		time.Sleep(d)
	}
	h.inside.Add(-1)
}

// increasing fails the test unless every hold's token is larger than every
// earlier hold's, whoever held it.
func (h *holds) increasing() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := 1; i < len(h.tokens); i++ {
		if h.tokens[i] <= h.tokens[i-1] {
			h.t.Fatalf("hold %d (%s) has token %d, not above hold %d's (%s) %d", i, h.who[i], h.tokens[i], i-1, h.who[i-1], h.tokens[i-1])
		}
	}
}

// A client passes a contended plain mutex among its own goroutines without
// Redis: far fewer scripts than acquisitions, one holder at a time, and
// tokens that grow with every hold.
func TestCohortPassesInProcess(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		cr := &counting{Redis: r}
		c := newClient(t, cr, prefix)
		h := &holds{t: t}
		ctx := ctxTimeout(t, 60*time.Second)
		const g, each = 6, 40
		var wg sync.WaitGroup
		for range g {
			wg.Go(func() {
				for range each {
					l, err := c.Lock(ctx, "cohort")
					if err != nil {
						t.Error(err)
						return
					}
					h.run("c", l, 200*time.Microsecond)
					if err := l.Unlock(ctx); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		h.increasing()
		if len(h.tokens) != g*each {
			t.Fatalf("%d holds, want %d", len(h.tokens), g*each)
		}
		// Two scripts per acquisition through Redis; passed on in-process,
		// none. With six goroutines waiting on each other, most are passed on.
		if n := cr.evals.Load(); n >= int64(g*each) {
			t.Fatalf("%d scripts for %d acquisitions: the holds were not passed on in-process", n, g*each)
		}
		t.Logf("%d scripts for %d acquisitions", cr.evals.Load(), g*each)
	})
}

// Tokens grow across cohort holds and every other kind of acquisition of
// the name: the block Redis reserves for a cohort covers every hold it
// passes on (a client that passed more would hand out a token that another
// client's later hold repeats).
func TestCohortTokensAcrossClients(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		h := &holds{t: t}
		ctx := ctxTimeout(t, 60*time.Second)
		deadline := time.Now().Add(1500 * time.Millisecond)
		var wg sync.WaitGroup
		var cohort, try, ttl atomic.Int64
		for i := range 2 {
			c := newClient(t, r, prefix)
			for range 5 {
				wg.Go(func() {
					for time.Now().Before(deadline) {
						l, err := c.Lock(ctx, "mixed")
						if err != nil {
							t.Error(err)
							return
						}
						h.run([]string{"cohort A", "cohort B"}[i], l, 50*time.Microsecond)
						cohort.Add(1)
						if err := l.Unlock(ctx); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
		}
		other := newClient(t, r, prefix)
		wg.Go(func() { // TryLock: one token per hold
			for time.Now().Before(deadline) {
				l, err := other.TryLock(ctx, "mixed")
				if err != nil {
					time.Sleep(time.Millisecond)
					continue
				}
				h.run("trylock", l, 0)
				try.Add(1)
				if err := l.Unlock(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		})
		wg.Go(func() { // a fixed lease: no cohort, through the Redis line
			for time.Now().Before(deadline) {
				l, err := other.Lock(ctx, "mixed", lock.WithTTL(5*time.Second))
				if err != nil {
					t.Error(err)
					return
				}
				h.run("ttl", l, 0)
				ttl.Add(1)
				if err := l.Unlock(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		})
		wg.Wait()
		h.increasing()
		t.Logf("holds: %d cohort, %d TryLock, %d fixed lease", cohort.Load(), try.Load(), ttl.Load())
		if ttl.Load() == 0 {
			t.Fatal("the waiter with a fixed lease never got the lock")
		}
	})
}

// slowRelease delays the release script (the only one with four
// arguments), so that the releasing client's next waiter joins the line in
// Redis before the release arrives.
type slowRelease struct{ lock.Redis }

func (s slowRelease) EvalSHA(ctx context.Context, sha string, keys, args []string) (int64, error) {
	if len(args) == 4 {
		time.Sleep(5 * time.Millisecond)
	}
	return s.Redis.EvalSHA(ctx, sha, keys, args)
}

// After its passes, a cohort lets a waiter of another client go first: a
// waiter waits for at most 1+16 holds of a client that hammers the lock.
// Its releases are slowed so that its own next waiter is in line before
// each: a release that did not yield would give the lock back to it, for
// up to 8 visits of 17 holds.
func TestCohortYields(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		ctx := ctxTimeout(t, 60*time.Second)
		hammer := newClient(t, slowRelease{r}, prefix)
		var n atomic.Int64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for range 6 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					l, err := hammer.Lock(ctx, "fair")
					if err != nil {
						t.Error(err)
						return
					}
					n.Add(1)
					time.Sleep(200 * time.Microsecond)
					l.Unlock(ctx)
				}
			})
		}
		defer func() { close(stop); wg.Wait() }()
		for n.Load() < 50 { // the hammer is at it
			time.Sleep(time.Millisecond)
		}
		// the hammer's holds counted from the waiter's first attempt's
		// answer: it is in line from then on
		mark := atomic.Int64{}
		waiter := newClient(t, r, prefix, lock.WithHooks(lock.Hooks{
			Attempt: func(string, time.Duration, error) { mark.CompareAndSwap(-1, n.Load()) },
		}))
		worst := int64(0)
		for range 5 {
			mark.Store(-1)
			l, err := waiter.Lock(ctx, "fair")
			if err != nil {
				t.Fatal(err)
			}
			worst = max(worst, n.Load()-mark.Load())
			l.Unlock(ctx)
			time.Sleep(5 * time.Millisecond)
		}
		// the rest of the hammer's visit under way (17 holds at most), and a
		// hold of the visit before it counted late (it adds after Lock returns)
		if worst > 18 {
			t.Fatalf("a waiter of another client waited for %d holds of the hammering client", worst)
		}
		t.Logf("at most %d holds of the other client before the waiter's", worst)
	})
}

// A cohort hold that is lost while its holder never unlocks does not strand
// the cohort's waiters: the next one asks Redis.
func TestCohortLostHoldWakesNext(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		ctx := ctxTimeout(t, 30*time.Second)
		c := newClient(t, r, prefix)
		lease := lock.WithWatchdog(300 * time.Millisecond)
		first, err := c.Lock(ctx, "lost", lease)
		if err != nil {
			t.Fatal(err)
		}
		got := lockAsync(func() (*lock.Lock, error) { return c.Lock(ctx, "lost", lease) })
		time.Sleep(50 * time.Millisecond) // let it wait in the cohort
		admin := newClient(t, r, prefix)
		if _, err := admin.ForceUnlock(ctx, "lost"); err != nil {
			t.Fatal(err)
		}
		select {
		case <-first.Done():
		case <-ctx.Done():
			t.Fatal("the first hold was never found lost")
		}
		if !errors.Is(context.Cause(first.Context()), lock.ErrLost) {
			t.Fatalf("cause %v, want ErrLost", context.Cause(first.Context()))
		}
		var second *lock.Lock
		select {
		case a := <-got:
			second = a.must(t)
		case <-ctx.Done():
			t.Fatal("the waiter never got the lock after the hold was lost")
		}
		if second.Token() <= first.Token() {
			t.Fatalf("token %d after %d", second.Token(), first.Token())
		}
		// the lost hold's late Unlock does not touch the new one
		if err := first.Unlock(ctx); !errors.Is(err, lock.ErrNotHeld) {
			t.Fatalf("late Unlock of the lost hold: %v, want ErrNotHeld", err)
		}
		if _, err := second.TTL(ctx); err != nil {
			t.Fatalf("the new hold after the lost one's Unlock: %v", err)
		}
		if err := second.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// Waiters whose context ends leave the cohort: one waiting in-process, and
// the one that waits in Redis for the cohort, whose place goes to the next.
func TestCohortCancelledWaiters(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		ctx := ctxTimeout(t, 30*time.Second)
		holder := newClient(t, r, prefix) // another client holds the lock
		h, err := holder.Lock(ctx, "cancel")
		if err != nil {
			t.Fatal(err)
		}
		c := newClient(t, r, prefix)
		start := func(ctx context.Context) chan error {
			done := make(chan error, 1)
			go func() {
				l, err := c.Lock(ctx, "cancel")
				if err == nil {
					l.Unlock(context.Background())
				}
				done <- err
			}()
			time.Sleep(50 * time.Millisecond) // in line, in this order
			return done
		}
		repCtx, cancelRep := context.WithCancel(ctx)
		rep := start(repCtx) // waits in Redis for the cohort
		midCtx, cancelMid := context.WithCancel(ctx)
		mid := start(midCtx) // waits in-process
		last := start(ctx)
		cancelMid()
		if err := <-mid; !errors.Is(err, lock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled in-process waiter: %v", err)
		}
		cancelRep()
		if err := <-rep; !errors.Is(err, lock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled representative: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // the last one now waits in Redis
		if err := h.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-last; err != nil {
			t.Fatalf("the last waiter: %v", err)
		}
		st, err := holder.Inspect(ctx, "cancel")
		if err != nil {
			t.Fatal(err)
		}
		if st.Locked() || st.Waiters != 0 {
			t.Fatalf("after everyone left: %+v", st)
		}
	})
}

// freezable stands for a process that can be frozen (SIGSTOP, a long GC
// pause, a stopped VM) as Redis sees it: while frozen, its scripts do not
// reach Redis (its watchdog's renewals included) until it thaws.
type freezable struct {
	lock.Redis
	mu   sync.Mutex
	gate chan struct{} // closed when thawed; nil when not frozen
}

func (f *freezable) freeze() func() {
	f.mu.Lock()
	gate := make(chan struct{})
	f.gate = gate
	f.mu.Unlock()
	return func() {
		f.mu.Lock()
		f.gate = nil
		f.mu.Unlock()
		close(gate)
	}
}

func (f *freezable) wait(ctx context.Context) error {
	f.mu.Lock()
	gate := f.gate
	f.mu.Unlock()
	if gate == nil {
		return nil
	}
	select {
	case <-gate:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *freezable) EvalSHA(ctx context.Context, sha string, keys, args []string) (int64, error) {
	if err := f.wait(ctx); err != nil {
		return 0, err
	}
	return f.Redis.EvalSHA(ctx, sha, keys, args)
}

func (f *freezable) Eval(ctx context.Context, src string, keys, args []string) (int64, error) {
	if err := f.wait(ctx); err != nil {
		return 0, err
	}
	return f.Redis.Eval(ctx, src, keys, args)
}

func (f *freezable) EvalSHAStrings(ctx context.Context, sha string, keys, args []string) ([]string, error) {
	if err := f.wait(ctx); err != nil {
		return nil, err
	}
	return f.Redis.EvalSHAStrings(ctx, sha, keys, args)
}

func (f *freezable) EvalStrings(ctx context.Context, src string, keys, args []string) ([]string, error) {
	if err := f.wait(ctx); err != nil {
		return nil, err
	}
	return f.Redis.EvalStrings(ctx, src, keys, args)
}

// TestCohortFencingUnderPauses runs the porcupine check of
// TestFencingLinearizable on cohorts: two clients of four goroutines each
// take the lock with a watchdog (so holds are passed on in-process), and
// each holder in turn freezes its whole client after its read, past the
// lease, until the other client's holder has read. With the read claiming
// the token every history is linearizable (the frozen holder's write is
// refused, and its cohort passes nothing on from a hold it no longer
// believes valid); the blind recipe, the control, loses updates.
func TestCohortFencingUnderPauses(t *testing.T) {
	const histories, perClient, ops = 4, 4, 6
	addr := testenv.RedisAddr(t)
	for _, claim := range []bool{true, false} {
		recipe := map[bool]string{true: "claim", false: "blind"}[claim]
		var k tally
		for h := range histories {
			p := fmt.Sprintf("%s:%s%d:", testenv.Prefix(t), recipe, h)
			res := &redisCounter{rdb: rawClient(t, addr), keys: []string{p + "{c}:v", p + "{c}:fence"}}
			var procs [2]*freezable
			var clients [2]*lock.Client
			for i := range procs {
				procs[i] = &freezable{Redis: dialRueidis(t, addr)}
				clients[i] = newClient(t, procs[i], p)
			}
			take := func(ctx context.Context, id int) (*lock.Lock, error) {
				return clients[id/perClient].Lock(ctx, "rmw", lock.WithWatchdog(60*time.Millisecond))
			}
			freeze := func(id int) func() { return procs[id/perClient].freeze() }
			k.add(pausedHistory(t, take, freeze, res, claim, 2*perClient, ops))
		}
		k.judge(t, "cohorts", claim)
	}
}
