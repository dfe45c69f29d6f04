package tests

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/lock"
	"github.com/seckilldev/seckill/lock/goredis"
	"github.com/seckilldev/seckill/lock/rueidislock"
)

// redlockDial makes one node's lock.Redis with a client that honours
// context deadlines, which Redlock's per-node timeouts rely on. Its own
// timeouts allow for a loaded 2-core machine under -race: rueidis's
// handshake with a new redis-server took longer than 200 ms there.
var redlockDial = map[string]func(t testing.TB, addr string) lock.Redis{
	"goredis": func(t testing.TB, addr string) lock.Redis {
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second,
			ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		return goredis.New(c)
	},
	"rueidis": func(t testing.TB, addr string) lock.Redis {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableRetry: true,
			ConnWriteTimeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return rueidislock.New(c)
	},
}

// vectorFence is the resource side of Redlock fencing (see Lock.Tokens): it
// keeps the largest token seen per node and refuses a write carrying a
// token below one of them.
type vectorFence struct {
	mu   sync.Mutex
	seen []int64
}

func (f *vectorFence) accept(tokens []int64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.seen == nil {
		f.seen = make([]int64, len(tokens))
	}
	for i, tok := range tokens {
		if tok != 0 && tok < f.seen[i] {
			return false
		}
	}
	for i, tok := range tokens {
		f.seen[i] = max(f.seen[i], tok)
	}
	return true
}

// redlockLease is the lease of the Redlock tests' locks. A Redlock request
// to one node may take a tenth of the lease (see NewRedlock): 300 ms, which a
// loaded 2-core machine under -race meets, where the 60 ms of a 600 ms lease
// did not, even for a first request that dials and loads the script.
const redlockLease = 3 * time.Second

// TestRedlock runs five redis-server processes, contends for one lock from
// ten goroutines, kills one node halfway, and checks that exclusion holds,
// progress continues, the watchdog keeps a lock over the kill, and vector
// fencing accepts every holder in turn and refuses a stale one.
func TestRedlock(t *testing.T) {
	for name, dial := range redlockDial {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var nodes []lock.Redis
			var servers []*testenv.RedisServer
			for range 5 {
				s := testenv.StartRedis(t)
				servers = append(servers, s)
				nodes = append(nodes, dial(t, s.Addr))
			}
			c := lock.NewRedlock(nodes, lock.WithPrefix("rl:"))
			t.Cleanup(func() { c.Close() })
			ctx := ctxTimeout(t, 60*time.Second)

			// a lock held by the watchdog across the kill of a node
			kept, err := c.Lock(ctx, "kept", lock.WithWatchdog(redlockLease))
			if err != nil {
				t.Fatal(err)
			}

			// Ten goroutines take turns until half acquisitions were made
			// before the kill of node 2 and half after it. The goroutine
			// that makes the last acquisition before the kill kills the
			// node while the others keep trying; every goroutine stops on
			// its own, so a failed one cannot hang the test.
			const goroutines, half = 10, 50
			var holders, before, after atomic.Int32
			var killed atomic.Bool
			fence := &vectorFence{}
			var wg sync.WaitGroup
			for range goroutines {
				wg.Go(func() {
					for after.Load() < half {
						l, err := c.Lock(ctx, "hot", lock.WithTTL(redlockLease))
						if err != nil {
							t.Error(err)
							return
						}
						if n := holders.Add(1); n != 1 {
							t.Errorf("%d holders at once", n)
						}
						if !fence.accept(l.Tokens()) {
							t.Errorf("vector fence refused a fresh holder: %v", l.Tokens())
						}
						time.Sleep(2 * time.Millisecond)
						holders.Add(-1)
						if err := unlockRedlock(ctx, l); err != nil {
							t.Error(err)
						}
						if killed.Load() {
							after.Add(1)
						} else if before.Add(1) == half {
							servers[2].Kill()
							killed.Store(true)
						}
					}
				})
			}
			wg.Wait()
			if b, a := before.Load(), after.Load(); b < half || a < half {
				t.Fatalf("%d acquisitions before the kill and %d after, want %d and %d", b, a, half, half)
			}

			// a stale holder: its lease ran out, someone else took the lock
			stale, err := c.TryLock(ctx, "stale", lock.WithTTL(redlockLease))
			if err != nil {
				t.Fatal(err)
			}
			staleFence := &vectorFence{}
			staleFence.accept(stale.Tokens())
			<-stale.Done() // the lease ran out; Lock waits for the nodes to agree
			fresh, err := c.Lock(ctx, "stale")
			if err != nil {
				t.Fatal(err)
			}
			if !staleFence.accept(fresh.Tokens()) {
				t.Errorf("fresh holder refused: %v after %v", fresh.Tokens(), stale.Tokens())
			}
			if staleFence.accept(stale.Tokens()) {
				t.Errorf("stale holder accepted: %v after %v", stale.Tokens(), fresh.Tokens())
			}
			fresh.Unlock(ctx)

			select {
			case <-kept.Done():
				t.Fatalf("the watchdog lost the lock with 4 of 5 nodes up: %v", context.Cause(kept.Context()))
			default:
			}
			if ttl, err := kept.TTL(ctx); err != nil || ttl <= 0 {
				t.Errorf("TTL = %v, %v", ttl, err)
			}

			// with 3 of 5 nodes down no quorum is possible, and the
			// partial acquisition on the live nodes is undone
			servers[0].Kill()
			servers[4].Kill()
			_, err = c.TryLock(ctx, "noquorum", lock.WithTTL(redlockLease))
			var qe *lock.QuorumError
			if !errors.As(err, &qe) || qe.OK != 2 || qe.Quorum != 3 || errors.Is(err, lock.ErrNotObtained) {
				t.Fatalf("got %v, want a QuorumError with 2 of 3 and no ErrNotObtained", err)
			}
			for _, i := range []int{1, 3} {
				raw := rawClient(t, servers[i].Addr)
				if n := raw.Exists(ctx, "rl:{noquorum}").Val(); n != 0 {
					t.Errorf("node %d still holds the failed acquisition", i)
				}
			}
			// the renewals fail from now on: the lease runs out within
			// redlockLease of the last one that succeeded
			select {
			case <-kept.Done():
				if cause := context.Cause(kept.Context()); !errors.Is(cause, lock.ErrLost) {
					t.Errorf("cause %v, want ErrLost", cause)
				}
			case <-time.After(redlockLease + 2*time.Second):
				t.Error("no lost signal with 3 of 5 nodes down")
			}
		})
	}
}

// unlockRedlock releases l, and tries again while no quorum answers, as
// Unlock's documentation allows, until the hold's validity has ended (it is
// gone by then). On a loaded 2-core machine under -race two of five
// redis-servers once left a release unanswered for the 1 s a node is
// awaited.
func unlockRedlock(ctx context.Context, l *lock.Lock) error {
	valid := l.ValidUntil()
	for {
		err := l.Unlock(ctx)
		var qe *lock.QuorumError
		if !errors.As(err, &qe) {
			return err
		}
		if !time.Now().Before(valid) {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRedlockContention: a Redlock lock taken on other nodes reports
// ErrNotObtained (taken), and a waiter is woken by the release.
func TestRedlockContention(t *testing.T) {
	var nodes []lock.Redis
	for range 3 {
		nodes = append(nodes, redlockDial["rueidis"](t, testenv.StartRedis(t).Addr))
	}
	taken := make(chan struct{}, 2) // c2's attempts that found the lock taken
	c1 := lock.NewRedlock(nodes)
	c2 := lock.NewRedlock(nodes, lock.WithHooks(lock.Hooks{
		Attempt: func(_ string, _ time.Duration, err error) {
			if errors.Is(err, lock.ErrNotObtained) {
				select {
				case taken <- struct{}{}:
				default:
				}
			}
		},
	}))
	t.Cleanup(func() { c1.Close(); c2.Close() })
	ctx := ctxTimeout(t, 20*time.Second)
	l, err := c1.TryLock(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c2.TryLock(ctx, "x"); !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("got %v, want ErrNotObtained", err)
	}
	<-taken
	got := make(chan error)
	go func() {
		l2, err := c2.Lock(ctx, "x", lock.WithRetry(lock.LinearBackoff(10*time.Second)))
		if err == nil {
			l2.Unlock(ctx)
		}
		got <- err
	}()
	<-taken // the waiter found it taken: only the release can wake it in time
	l.Unlock(ctx)
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the Redlock waiter was not woken by the release")
	}
}

// TestRedlockReleaseBareQuorum: a lock taken on a bare quorum (3 of 5, as
// a split vote under contention leaves it), one node of which then fails,
// is released: the two other holders release it and the two nodes that
// never held it say so, so no quorum can hold it whatever the failed node
// holds. Unlock reports success, and another client takes the lock.
func TestRedlockReleaseBareQuorum(t *testing.T) {
	addr := testenv.RedisAddr(t)
	prefix := testenv.Prefix(t) + ":"
	var nodes []*counting
	var rs []lock.Redis
	for db := range 5 {
		c := redis.NewClient(&redis.Options{Addr: addr, DB: db, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		n := &counting{Redis: goredis.New(c)}
		nodes = append(nodes, n)
		rs = append(rs, n)
	}
	c1 := lock.NewRedlock(rs, lock.WithPrefix(prefix))
	c2 := lock.NewRedlock(rs, lock.WithPrefix(prefix))
	t.Cleanup(func() { c1.Close(); c2.Close() })
	ctx := ctxTimeout(t, 20*time.Second)

	nodes[3].fail.Store(true)
	nodes[4].fail.Store(true)
	l, err := c1.TryLock(ctx, "bare", lock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if tok := l.Tokens(); tok[0] == 0 || tok[1] == 0 || tok[2] == 0 || tok[3] != 0 || tok[4] != 0 {
		t.Fatalf("tokens %v, want the lock on nodes 0, 1 and 2", tok)
	}
	nodes[3].fail.Store(false)
	nodes[4].fail.Store(false)
	nodes[2].fail.Store(true)
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock with 4 of 5 nodes up: %v", err)
	}
	nodes[2].fail.Store(false)
	// node 2 still holds its part, until its lease ends: a minority
	l2, err := c2.TryLock(ctx, "bare")
	if err != nil {
		t.Fatalf("after the release: %v", err)
	}
	if tok := l2.Tokens(); tok[2] != 0 {
		t.Errorf("tokens %v: node 2 should still hold the first lock", tok)
	}
	l2.Unlock(ctx)
	raw := redis.NewClient(&redis.Options{Addr: addr, DB: 2})
	defer raw.Close()
	raw.Del(ctx, prefix+"{bare}", prefix+"{bare}:fence")
}

// TestRedlockStragglerArgs: a node whose client reads a call's arguments
// and then hangs past the attempt's per-node timeout is left to answer in
// the background, while the Lock tries again and writes its next attempt's
// arguments. The node's call must hold arguments of its own: it used to
// read the Lock's, a data race that -race reports here.
func TestRedlockStragglerArgs(t *testing.T) {
	addr := testenv.RedisAddr(t)
	prefix := testenv.Prefix(t) + ":"
	var rs []lock.Redis
	for db := range 5 {
		c := redis.NewClient(&redis.Options{Addr: addr, DB: db, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		rs = append(rs, goredis.New(c))
	}
	slow := &straggler{Redis: rs[4], gate: make(chan struct{}), calls: make(chan struct{}, 64)}
	open := sync.OnceFunc(func() { close(slow.gate) })
	holder := lock.NewRedlock(rs, lock.WithPrefix(prefix))
	waiter := lock.NewRedlock(append(slices.Clone(rs[:4]), slow), lock.WithPrefix(prefix))
	t.Cleanup(func() { open(); holder.Close(); waiter.Close() })
	ctx := ctxTimeout(t, 20*time.Second)

	held, err := holder.TryLock(ctx, "straggler", lock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := lockAsync(func() (*lock.Lock, error) {
		return waiter.Lock(ctx, "straggler", lock.WithTTL(2*time.Second), lock.WithRetry(lock.LinearBackoff(20*time.Millisecond)))
	})
	// The slow node's calls: the first attempt's, the release that follows
	// it (the node's state is unknown), the next attempt's and its release.
	for range 4 {
		select {
		case <-slow.calls:
		case <-ctx.Done():
			t.Fatal("the slow node got fewer than four calls")
		}
	}
	open()
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l := (<-got).must(t)
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// straggler is a node whose client reads each call's arguments, as a
// client encoding the command does, and answers only once gate is closed,
// whatever the call's deadline. calls receives a value per call while it
// has room. While a call hangs it reads the arguments again and again, as
// a client writing a large command bit by bit would: a write to them by
// another goroutine in that time is then seen by -race whichever access
// came first.
type straggler struct {
	lock.Redis
	gate  chan struct{}
	calls chan struct{}
}

func (s *straggler) hang(args []string) {
	_ = strings.Join(args, " ")
	select {
	case s.calls <- struct{}{}:
	default: // the test counts the first few calls only
	}
	for {
		select {
		case <-s.gate:
			return
		case <-time.After(100 * time.Microsecond):
			_ = strings.Join(args, " ")
		}
	}
}

func (s *straggler) EvalSHA(ctx context.Context, sha string, keys, args []string) (int64, error) {
	s.hang(args)
	return s.Redis.EvalSHA(ctx, sha, keys, args)
}

func (s *straggler) Eval(ctx context.Context, src string, keys, args []string) (int64, error) {
	s.hang(args)
	return s.Redis.Eval(ctx, src, keys, args)
}

func (s *straggler) EvalSHAStrings(ctx context.Context, sha string, keys, args []string) ([]string, error) {
	s.hang(args)
	return s.Redis.EvalSHAStrings(ctx, sha, keys, args)
}

func (s *straggler) EvalStrings(ctx context.Context, src string, keys, args []string) ([]string, error) {
	s.hang(args)
	return s.Redis.EvalStrings(ctx, src, keys, args)
}

// TestRedlockWaitsForQuorum: Lock goes on trying while no quorum answers
// (two of three nodes frozen: their calls wait until they thaw or the
// call's context ends), each attempt awaiting the nodes for a third of the
// lease, and succeeds once a quorum answers again; it used to return the
// first attempt's QuorumError. TryLock returns that error; a Lock whose
// context ends first returns ErrNotObtained with the context's error and
// the last attempt's QuorumError.
func TestRedlockWaitsForQuorum(t *testing.T) {
	t.Parallel()
	addr := testenv.RedisAddr(t)
	prefix := testenv.Prefix(t) + ":"
	var nodes []*freezable
	var rs []lock.Redis
	for db := range 3 {
		c := redis.NewClient(&redis.Options{Addr: addr, DB: db, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		n := &freezable{Redis: goredis.New(c)}
		nodes = append(nodes, n)
		rs = append(rs, n)
	}
	const lease = 900 * time.Millisecond // a node is awaited for 300 ms
	var mu sync.Mutex
	var failed []time.Duration // attempts that no quorum answered
	c := lock.NewRedlock(rs, lock.WithPrefix(prefix), lock.WithHooks(lock.Hooks{
		Attempt: func(_ string, d time.Duration, err error) {
			// (an attempt that the context of Lock ended is not counted)
			var qe *lock.QuorumError
			if errors.As(err, &qe) && !errors.Is(err, lock.ErrNotObtained) && !errors.Is(err, context.DeadlineExceeded) {
				mu.Lock()
				failed = append(failed, d)
				mu.Unlock()
			}
		},
	}))
	t.Cleanup(func() { c.Close() })
	ctx := ctxTimeout(t, 30*time.Second)
	attempts := func() []time.Duration {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(failed)
	}

	thaw1, thaw2 := nodes[1].freeze(), nodes[2].freeze()
	_, err := c.TryLock(ctx, "q", lock.WithTTL(lease))
	var qe *lock.QuorumError
	if !errors.As(err, &qe) || qe.OK != 1 || errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("TryLock with 2 of 3 nodes frozen: %v, want a QuorumError with 1 of 2", err)
	}

	short, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	_, err = c.Lock(short, "q", lock.WithTTL(lease))
	cancel()
	if !errors.Is(err, lock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &qe) {
		t.Fatalf("Lock until its context ended: %v, want ErrNotObtained, DeadlineExceeded and the last QuorumError", err)
	}

	before := len(attempts())
	got := lockAsync(func() (*lock.Lock, error) { return c.Lock(ctx, "q", lock.WithTTL(lease)) })
	waitFor(t, 10*time.Second, "two attempts without a quorum", func() bool { return len(attempts()) >= before+2 })
	thaw1()
	l := (<-got).must(t)
	if tok := l.Tokens(); tok[0] == 0 || tok[1] == 0 {
		t.Errorf("tokens %v, want nodes 0 and 1", tok)
	}
	for _, d := range attempts() {
		if d < lease/3 {
			t.Errorf("an attempt without a quorum gave up after %v, before the per-node timeout of %v", d, lease/3)
		}
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	thaw2()
}
