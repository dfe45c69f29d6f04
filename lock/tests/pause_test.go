package tests

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/lock"
)

// TestPausedWaiterGrant is the regression test of a safety bug (issue 25,
// item 1): a waiter paused across the grant of the lock and the grant's
// expiry was given a hold that had already gone. Its process resumed with
// two things ready, its place timer and the grant's message; when the timer
// went first, the waiter's poll found the lock taken by another holder, and
// the grant's message, handled after it, was believed with a validity of
// poll time + lease: Lock returned nil with ValidUntil a lease ahead while
// the other holder held the lock (SIGSTOP measured it in 3 to 9 trials of
// 20, and two holders of a mutex, six of a 3-permit semaphore).
//
// The pause is made in one process, with no stand-in for Redis: the
// waiter's client (see pauser) stops right after a poll's answer, its
// grant's message is held back, the test releases the lock to it, waits
// until the grant's lease has run out in Redis and another client took the
// lock, and resumes the waiter. "poll first" delivers the message once the
// waiter's next poll has been answered: the order that broke, every time;
// "both ready" delivers it as the waiter resumes, and the waiter's select
// picks the message or the timer (about half of the trials broke). Whenever
// a Lock (Acquire) returns, the test asks Redis whether the hold is there
// (a permit: in its own slot) and lasts at least until its ValidUntil.
//
// The cases mostly wait for leases to run out: they run together, not in
// turn (-parallel is the number of CPUs).
func TestPausedWaiterGrant(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		var wg sync.WaitGroup
		for _, kind := range []string{"mutex", "semaphore"} {
			for _, lease := range []string{"ttl", "watchdog"} {
				for _, order := range []string{"poll first", "both ready"} {
					p := newPauser(order == "both ready")
					p.Redis = a.dial(t, testenv.RedisAddr(t))
					waiter := newClient(t, p, prefix)
					c := pausedCase{kind: kind, lease: lease, order: order, others: newClient(t, r, prefix), waiter: waiter, p: p}
					wg.Go(func() {
						if err := c.run(); err != nil {
							t.Errorf("%s %s, %s, %s: %v", a.name, kind, lease, order, err)
						}
					})
				}
			}
		}
		wg.Wait()
	})
}

// pausedCase is one case of TestPausedWaiterGrant.
type pausedCase struct {
	kind, lease, order string
	others             *lock.Client // the holder, then the one that takes the expired grant's place
	waiter             *lock.Client // on p
	p                  *pauser
}

func (pc pausedCase) run() (err error) {
	// The waiter's place lasts its lease from its last poll: the test
	// releases the lock to it within that (one round trip after the poll).
	const lease = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p := pc.p
	name := "paused-" + pc.kind + "-" + pc.lease + "-" + pc.order
	opt := lock.WithTTL(lease)
	if pc.lease == "watchdog" {
		opt = lock.WithWatchdog(lease)
	}
	long := lock.WithTTL(30 * time.Second)
	const permits = 2
	take := func(c *lock.Client) (*lock.Lock, error) { return c.Lock(ctx, name, opt) }
	try := func(c *lock.Client) (*lock.Lock, error) { return c.TryLock(ctx, name, long) }
	if pc.kind == "semaphore" {
		take = func(c *lock.Client) (*lock.Lock, error) { return c.Semaphore(name, permits).Acquire(ctx, opt) }
		try = func(c *lock.Client) (*lock.Lock, error) { return c.Semaphore(name, permits).TryAcquire(ctx, long) }
	}
	holder, err := try(pc.others)
	if err != nil {
		return err
	}
	if pc.kind == "semaphore" {
		// the other permit stays held throughout: the waiter can only get
		// the holder's
		rest, err := try(pc.others)
		if err != nil {
			return err
		}
		defer rest.Unlock(ctx)
	}

	// At the waiter's first poll once subscribed: the holder releases the
	// lock, which goes to the waiter, and the waiter's process pauses.
	released := make(chan error, 1)
	p.arm(func(time.Time) { released <- holder.Unlock(ctx) })
	done := make(chan checked, 1)
	go func() {
		l, err := take(pc.waiter)
		done <- check(ctx, pc.others, name, l, err)
	}()
	defer func() {
		// a case that failed early leaves nothing blocked behind it
		p.resume()
		cancel()
	}()
	wait := func(ch <-chan struct{}, what string) error {
		select {
		case <-ch:
			return nil
		case c := <-done:
			return fmt.Errorf("the waiter returned before %s: %+v", what, c)
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

	// The grant's lease runs out while the waiter is paused, and another
	// client takes the lock (the waiter's slot, for a semaphore).
	var next *lock.Lock
	for deadline := time.Now().Add(2*lease + 10*time.Second); ; time.Sleep(5 * time.Millisecond) {
		next, err = try(pc.others)
		if err == nil {
			break
		}
		if !errors.Is(err, lock.ErrNotObtained) || time.Now().After(deadline) {
			return fmt.Errorf("taking the lock once the grant's lease ran out: %w", err)
		}
	}
	c, returned, err := resume(ctx, p, done, next, "the lock")
	if err != nil {
		return err
	}
	if c.err != nil {
		return fmt.Errorf("the waiter: %w", c.err)
	}
	defer c.l.Unlock(ctx)
	if c.problem != "" {
		if returned {
			return fmt.Errorf("returned while the next holder holds the lock: %s", c.problem)
		}
		return errors.New(c.problem)
	}
	return nil
}

// resume resumes the paused waiter of a TestPausedWaiterGrant case, next
// holding what the waiter's grant gave (what names it), and returns what
// the waiter's call sent on done, and whether it returned while next held
// it. The waiter returns, or waits on, having asked Redis: once after the
// message (poll first); twice after resuming (both ready: the message then
// a poll, or a poll then the message then a poll). Then next is released,
// and a waiter still waiting must get it.
func resume[T any](ctx context.Context, p *pauser, done <-chan T, next *lock.Lock, what string) (T, bool, error) {
	var zero, v T
	p.resume()
	returned := false
	polls := 1
	if !p.onResume {
		select {
		case <-p.delivered:
		case v := <-done:
			return zero, false, fmt.Errorf("the waiter returned before its next poll: %+v", v)
		case <-time.After(20 * time.Second):
			return zero, false, errors.New("timed out waiting for the waiter's next poll")
		}
	} else {
		polls = 2
	}
	for ; polls > 0 && !returned; polls-- {
		select {
		case v = <-done:
			returned = true
		case <-p.polls:
		case <-time.After(20 * time.Second):
			return zero, false, errors.New("the waiter neither returned nor polled")
		}
	}
	if err := next.Unlock(ctx); err != nil {
		return zero, false, err
	}
	if !returned {
		select {
		case v = <-done:
		case <-time.After(20 * time.Second):
			return zero, false, fmt.Errorf("the waiter did not get %s once the next holder released it", what)
		}
	}
	return v, returned, nil
}

// TestGrantAfterPoll: a grant made after the waiter's last poll is
// believed as it comes, without a round trip more (TestPausedWaiterGrant's
// fix asks Redis only about a grant made before the last poll), and is
// valid until its ValidUntil. The holder releases the lock to the waiter
// right after one of its polls.
func TestGrantAfterPoll(t *testing.T) {
	forEachAdapter(t, func(t *testing.T, a adapter, r lock.Redis, prefix string) {
		for _, kind := range []string{"mutex", "semaphore"} {
			t.Run(kind, func(t *testing.T) {
				const lease = 3 * time.Second // a poll every second
				ctx := ctxTimeout(t, 30*time.Second)
				others := newClient(t, r, prefix)
				p := newPauser(false)
				p.pause = false
				cr := &counting{Redis: a.dial(t, testenv.RedisAddr(t))}
				p.Redis = cr
				waiter := newClient(t, p, prefix)
				name := "after-poll-" + kind
				take := func(c *lock.Client) (*lock.Lock, error) { return c.Lock(ctx, name, lock.WithTTL(lease)) }
				try := func(c *lock.Client) (*lock.Lock, error) { return c.TryLock(ctx, name) }
				if kind == "semaphore" {
					take = func(c *lock.Client) (*lock.Lock, error) {
						return c.Semaphore(name, 1).Acquire(ctx, lock.WithTTL(lease))
					}
					try = func(c *lock.Client) (*lock.Lock, error) { return c.Semaphore(name, 1).TryAcquire(ctx) }
				}
				holder, err := try(others)
				if err != nil {
					t.Fatal(err)
				}
				var polledAt time.Time // when the poll was sent: the next one is due a third of the lease later
				var scripts int64
				p.arm(func(sent time.Time) {
					polledAt, scripts = sent, cr.evals.Load()
					if err := holder.Unlock(ctx); err != nil {
						t.Errorf("release to the waiter: %v", err)
					}
				})
				l, err := take(waiter)
				c := check(ctx, others, name, l, err)
				returned := time.Now()
				if c.err != nil {
					t.Fatal(c.err)
				}
				defer c.l.Unlock(ctx)
				if c.problem != "" {
					t.Error(c.problem)
				}
				// check ran one script of the waiter's client: TTL
				n := cr.evals.Load() - scripts - 1
				if n > 0 && returned.Sub(polledAt) < lease/3 {
					t.Errorf("the waiter ran %d scripts between the grant and its return", n)
				}
			})
		}
	})
}

// checked is a hold as Redis saw it the moment Lock returned it.
type checked struct {
	l       *lock.Lock
	err     error
	problem string // what Redis says against the hold's validity, or ""
}

// check asks Redis whether l, just returned by Lock or Acquire, is held, in
// its own slot, with a lease that lasts at least until its ValidUntil. A
// hold whose validity ended before a question was sent claims nothing:
// check finds no problem with it. (A loaded machine stalled the check
// between its two questions for longer than the hold's validity: the
// second found the lock free, as it may be by then.)
func check(ctx context.Context, c *lock.Client, name string, l *lock.Lock, err error) checked {
	if err != nil {
		return checked{err: err}
	}
	out := checked{l: l}
	valid := l.ValidUntil()
	before := time.Now()
	ttl, err := l.TTL(ctx)
	after := time.Now()
	var st lock.State
	if err == nil {
		st, err = c.Inspect(ctx, name)
	}
	switch {
	case !before.Before(valid), err == nil && !after.Before(valid):
	case errors.Is(err, lock.ErrNotHeld):
		out.problem = fmt.Sprintf("valid for %v more, token %d, slot %d: Redis does not hold it", valid.Sub(before), l.Token(), l.Slot())
	case err != nil:
		out.problem = err.Error()
	case after.Add(ttl + time.Millisecond).Before(valid):
		out.problem = fmt.Sprintf("valid for %v more, Redis holds it for %v", valid.Sub(before), ttl)
	default:
		mine, others := 0, 0
		for _, h := range st.Holds {
			switch {
			case h.Token == l.Token() && h.Slot == l.Slot():
				mine++
			case h.Slot == l.Slot():
				others++
			}
		}
		if mine != 1 || others != 0 {
			out.problem = fmt.Sprintf("token %d, slot %d: Redis holds %+v", l.Token(), l.Slot(), st.Holds)
		}
	}
	return out
}

// pauser stands for the process of a waiter paused (SIGSTOP, a GC pause, a
// stopped VM) right after a poll found the lock taken: the poll's answer
// is read, then nothing runs until resume; the grant made meanwhile waits
// in the socket. When the process resumes, its place timer and the grant's
// message are both ready. With onResume, pauser delivers the message as it
// resumes, and the waiter's select picks either; without, it makes the
// timer go first: the message is delivered once the waiter's next poll has
// been answered.
type pauser struct {
	lock.Redis
	onResume  bool
	pause     bool // false: the first poll once subscribed runs onPause, and nothing pauses
	mu        sync.Mutex
	onPause   func(sent time.Time) // run at the pausing poll, before pausing; nil once run
	subbed    bool                 // the subscription is confirmed: a grant will be heard
	holding   bool                 // messages are held back
	held      []string
	message   func(string)
	resumed   bool
	paused    chan struct{} // closed when paused
	got       chan struct{} // closed when a message was held back
	wake      chan struct{} // closed by resume
	delivered chan struct{} // closed when the held messages were delivered
	polls     chan struct{} // a poll was answered after the delivery
}

func newPauser(onResume bool) *pauser {
	return &pauser{onResume: onResume, pause: true, paused: make(chan struct{}), got: make(chan struct{}),
		wake: make(chan struct{}), delivered: make(chan struct{}), polls: make(chan struct{}, 16)}
}

// arm pauses the waiter at its first poll once its client is subscribed,
// after running f with the time the poll was sent.
func (p *pauser) arm(f func(sent time.Time)) {
	p.mu.Lock()
	p.onPause = f
	p.mu.Unlock()
}

// resume ends the pause; a second call does nothing.
func (p *pauser) resume() {
	p.mu.Lock()
	if p.resumed {
		p.mu.Unlock()
		return
	}
	p.resumed = true
	if p.onResume {
		p.deliver()
	}
	p.mu.Unlock()
	close(p.wake)
}

// deliver hands the held messages to the waiter's client. p.mu is held.
func (p *pauser) deliver() {
	p.holding = false
	for _, m := range p.held {
		p.message(m)
	}
	p.held = nil
	close(p.delivered)
}

// polled runs when a poll of the waiter sent at sent has been answered, on
// its goroutine.
func (p *pauser) polled(ctx context.Context, sent time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.onPause != nil && p.subbed && !p.resumed:
		f := p.onPause
		p.onPause, p.holding = nil, p.pause
		p.mu.Unlock()
		f(sent)
		if !p.pause {
			p.mu.Lock()
			return
		}
		close(p.paused)
		select {
		case <-p.wake:
		case <-ctx.Done():
		}
		p.mu.Lock()
	case p.resumed && p.holding:
		p.deliver()
	case p.resumed:
		select {
		case p.polls <- struct{}{}:
		default:
		}
	}
}

// isPoll reports whether args are those of the acquire script from a
// waiter in line (see scripts/acquire.lua: ARGV[4] is '2').
func isPoll(args []string) bool { return len(args) >= 7 && args[3] == "2" }

func (p *pauser) EvalSHAStrings(ctx context.Context, sha string, keys, args []string) ([]string, error) {
	sent := time.Now()
	v, err := p.Redis.EvalSHAStrings(ctx, sha, keys, args)
	if err == nil && isPoll(args) {
		p.polled(ctx, sent)
	}
	return v, err
}

func (p *pauser) EvalStrings(ctx context.Context, src string, keys, args []string) ([]string, error) {
	sent := time.Now()
	v, err := p.Redis.EvalStrings(ctx, src, keys, args)
	if err == nil && isPoll(args) {
		p.polled(ctx, sent)
	}
	return v, err
}

func (p *pauser) Subscribe(ctx context.Context, channel string, ready func(), message func(string)) error {
	p.mu.Lock()
	p.message = message
	p.mu.Unlock()
	return p.Redis.Subscribe(ctx, channel, func() {
		p.mu.Lock()
		p.subbed = true
		p.mu.Unlock()
		ready()
	}, func(m string) {
		p.mu.Lock()
		if p.holding {
			if len(p.held) == 0 {
				close(p.got)
			}
			p.held = append(p.held, m)
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		message(m)
	})
}
