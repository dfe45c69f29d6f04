package tests

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/lock"
)

var (
	handoffRounds = flag.Int("handoff.rounds", 100, "TestHandoffExclusion: acquisitions per client and case")
	handoffSlow   = flag.Int("handoff.slow", 8, "TestHandoffExclusion: one poll in this many is slowed down (0: none)")
)

// TestHandoffExclusion is the regression test of a safety bug: two holders
// of one mutex after a release (expiry.TestFailover saw two leaders). A
// waiter's poll found that it had been given the lock, but too long after
// its previous poll to trust the grant's lease, so it released the hold,
// which went to the next waiter; the grant's message, handled after the
// poll, was then believed: Lock returned the hold that the next waiter
// held.
//
// Clients (as separate processes would have: a lock.Client each) contend
// for one mutex with short leases, under a watchdog and with a fixed lease,
// each releasing it while the others wait. Whenever Lock returns, the
// holder records itself in a register and checks that no other holder
// recorded there still believes the lock valid (its ValidUntil), and that
// Redis holds its token. A loaded machine makes the polls late on its own;
// a few polls are also slowed down here, by about a lease, as a paused
// process would be.
func TestHandoffExclusion(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		addr := testenv.RedisAddr(t)
		raw := rawClient(t, addr)
		for _, how := range []string{"watchdog", "ttl"} {
			t.Run(how, func(t *testing.T) {
				const clients, lease = 5, 30 * time.Millisecond
				opt := lock.WithWatchdog(lease)
				if how == "ttl" {
					opt = lock.WithTTL(lease)
				}
				name := "handoff-" + how
				key := prefix + "{" + name + "}"
				ctx := ctxTimeout(t, 5*time.Minute)
				reg := &register{}
				var wg sync.WaitGroup
				for i := range clients {
					c := newClient(t, &slowPolls{Redis: a.dial(t, addr), delay: lease}, prefix)
					who := strconv.Itoa(i)
					wg.Go(func() {
						for range *handoffRounds {
							l, err := c.Lock(ctx, name, opt)
							if err != nil {
								t.Error(err)
								return
							}
							reg.enter(ctx, raw, key, who, l)
							time.Sleep(time.Duration(rand.IntN(5000)) * time.Microsecond)
							reg.exit(l)
							_ = l.Unlock(ctx) // ErrNotHeld: lost under load, as the register allows
						}
					})
				}
				wg.Wait()
				reg.mu.Lock()
				defer reg.mu.Unlock()
				t.Logf("%d acquisitions, %d overlaps, %d not in Redis", reg.entries, reg.overlaps, reg.absent)
				for _, p := range reg.problems {
					t.Error(p)
				}
			})
		}
	})
}

// register is the holders of one mutex as they see themselves.
type register struct {
	mu       sync.Mutex
	in       map[*lock.Lock]string // by holder: who
	entries  int
	overlaps int // a holder entered while another still believed the lock valid
	absent   int // a valid holder's token was not in Redis
	problems []string
}

// enter records l, just returned by Lock to who, and checks it against the
// other holders recorded and against Redis (key).
func (g *register) enter(ctx context.Context, raw *redis.Client, key, who string, l *lock.Lock) {
	g.mu.Lock()
	now := time.Now()
	mine := l.ValidUntil()
	if g.in == nil {
		g.in = make(map[*lock.Lock]string)
	}
	for o, other := range g.in {
		if theirs := o.ValidUntil(); now.Before(theirs) && now.Before(mine) {
			g.overlaps++
			g.note("%s got token %d (valid for %v more) while %s held token %d (valid for %v more)",
				who, l.Token(), mine.Sub(now), other, o.Token(), theirs.Sub(now))
		}
	}
	g.in[l] = who
	g.entries++
	g.mu.Unlock()

	// K is "<hold token> <fencing token>[ <streak>]"; a hold passed on
	// in-process has a token of the block that Redis reserved (17).
	v, err := raw.Get(ctx, key).Result()
	after := time.Now()
	if !after.Before(l.ValidUntil()) {
		return // its validity ended meanwhile: it claims nothing
	}
	f := strings.Fields(v)
	var token int64
	if len(f) >= 2 {
		token, _ = strconv.ParseInt(f[1], 10, 64)
	}
	if (err != nil && err != redis.Nil) || token == 0 || l.Token() < token || l.Token() >= token+17 {
		g.mu.Lock()
		g.absent++
		g.note("%s holds token %d, valid for %v more: Redis holds %q (%v)", who, l.Token(), time.Until(l.ValidUntil()), v, err)
		g.mu.Unlock()
	}
}

// exit takes l out of the register, before its Unlock.
func (g *register) exit(l *lock.Lock) {
	g.mu.Lock()
	delete(g.in, l)
	g.mu.Unlock()
}

// note keeps the first problems. g.mu is held.
func (g *register) note(format string, args ...any) {
	if len(g.problems) < 10 {
		g.problems = append(g.problems, fmt.Sprintf(format, args...))
	}
}

// slowPolls delays the answer of one poll in -handoff.slow (see isPoll) by
// about delay, as a process paused or starved after it sent the poll.
type slowPolls struct {
	lock.Redis
	delay time.Duration
}

func (s *slowPolls) slow(args []string) {
	if n := *handoffSlow; n > 0 && isPoll(args) && rand.IntN(n) == 0 {
		time.Sleep(s.delay/2 + rand.N(s.delay))
	}
}

func (s *slowPolls) EvalSHAStrings(ctx context.Context, sha string, keys, args []string) ([]string, error) {
	v, err := s.Redis.EvalSHAStrings(ctx, sha, keys, args)
	s.slow(args)
	return v, err
}

func (s *slowPolls) EvalStrings(ctx context.Context, src string, keys, args []string) ([]string, error) {
	v, err := s.Redis.EvalStrings(ctx, src, keys, args)
	s.slow(args)
	return v, err
}

// TestTooOldGrantReleaseFails: a waiter's poll finds it was given the lock
// too long after its previous poll (that poll's answer came late), and the
// release of that hold fails; its next poll finds the hold still there. Its
// lease began before the poll that found it, not after: the waiter must not
// count it from there (it did: Lock returned it valid for about half a
// lease after Redis would let it expire). The grant's messages are lost.
func TestTooOldGrantReleaseFails(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		const lease = 1500 * time.Millisecond
		ctx := ctxTimeout(t, 30*time.Second)
		others := newClient(t, r, prefix)
		name := "too-old"
		holder, err := others.TryLock(ctx, name, lock.WithTTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		// The first poll's answer comes 1.7 s late (more than the lease),
		// and the lock is released to the waiter 1.2 s into that: the next
		// poll finds the hold, too old, and its release fails; the poll
		// after, 0.5 s later, finds the hold again, 1 s into its lease.
		f := &failOnce{Redis: a.dial(t, testenv.RedisAddr(t)), late: 1700 * time.Millisecond,
			onLate: func() {
				time.Sleep(1200 * time.Millisecond)
				if err := holder.Unlock(ctx); err != nil {
					t.Errorf("release to the waiter: %v", err)
				}
			}}
		waiter := newClient(t, f, prefix)
		l, err := waiter.Lock(ctx, name, lock.WithTTL(lease))
		c := check(ctx, others, name, l, err)
		if c.err != nil {
			t.Fatal(c.err)
		}
		defer c.l.Unlock(ctx)
		f.mu.Lock()
		t.Logf("release failed: %v; the next poll found the hold: %v", f.failed, f.heldAgain)
		f.mu.Unlock()
		if c.problem != "" {
			t.Error(c.problem)
		}
	})
}

// failOnce delays the answer of the first poll by late (running onLate
// meanwhile), fails the first release of the waiter (which has no other),
// and loses every message of its subscription.
type failOnce struct {
	lock.Redis
	late   time.Duration
	onLate func()

	mu        sync.Mutex
	polls     int
	failed    bool // the release failed
	heldAgain bool // a poll after it found the hold
}

func (f *failOnce) poll(args []string, r []string) {
	if !isPoll(args) {
		return
	}
	f.mu.Lock()
	f.polls++
	first := f.polls == 1
	if f.failed && len(r) > 2 && r[2] == "1" {
		f.heldAgain = true
	}
	f.mu.Unlock()
	if first {
		done := time.After(f.late)
		f.onLate()
		<-done
	}
}

// isRelease reports whether args are those of the release script (see
// scripts/release.lua: four arguments).
func isRelease(args []string) bool { return len(args) == 4 }

func (f *failOnce) EvalSHA(ctx context.Context, sha string, keys, args []string) (int64, error) {
	if isRelease(args) {
		f.mu.Lock()
		fail := !f.failed
		f.failed = true
		f.mu.Unlock()
		if fail {
			return 0, errInjected
		}
	}
	return f.Redis.EvalSHA(ctx, sha, keys, args)
}

func (f *failOnce) EvalSHAStrings(ctx context.Context, sha string, keys, args []string) ([]string, error) {
	v, err := f.Redis.EvalSHAStrings(ctx, sha, keys, args)
	f.poll(args, v)
	return v, err
}

func (f *failOnce) EvalStrings(ctx context.Context, src string, keys, args []string) ([]string, error) {
	v, err := f.Redis.EvalStrings(ctx, src, keys, args)
	f.poll(args, v)
	return v, err
}

func (f *failOnce) Subscribe(ctx context.Context, channel string, ready func(), message func(string)) error {
	return f.Redis.Subscribe(ctx, channel, ready, func(string) {})
}
