package expiry_test

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/expiry"
	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/lock"
	goredislock "github.com/seckilldev/seckill/lock/goredis"
	"github.com/seckilldev/seckill/stock"
	"github.com/seckilldev/seckill/store"
)

// lease is the leader's lease in these tests: short, so that takeovers
// happen within the tests' time.
const lease = time.Second

// forEachStore runs f on a fresh database of each engine.
func forEachStore(t *testing.T, f func(t *testing.T, e *env)) {
	for _, db := range []struct {
		name string
		url  func(testing.TB) string
	}{
		{"sqlite", func(t testing.TB) string { return "sqlite://" + filepath.Join(t.TempDir(), "e.db") }},
		{"postgres", testenv.PostgresURL},
		{"mysql", testenv.MySQLURL},
	} {
		t.Run(db.name, func(t *testing.T) { f(t, newEnv(t, db.url(t))) })
	}
}

// env is a database and a Redis namespace of one test.
type env struct {
	t      *testing.T
	store  seckill.Store
	engine *stock.Engine
	rdb    *redis.Client
	prefix string
	users  atomic.Int64 // the last user id handed out
}

func newEnv(t *testing.T, dbURL string) *env {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() { rdb.Close() })
	prefix := testenv.Prefix(t)
	e := stock.New(rdb, stock.Config{Prefix: prefix})
	t.Cleanup(e.Close)
	return &env{t: t, store: st, engine: e, rdb: rdb, prefix: prefix}
}

// sale creates a live activity with a payment window and loads it into
// Redis.
func (e *env) sale(stockN int64, payWithin time.Duration) seckill.Activity {
	e.t.Helper()
	ctx := context.Background()
	a := seckill.Activity{Name: "expiry", Stock: stockN, StartsAt: time.Now().Add(-time.Minute),
		EndsAt: time.Now().Add(time.Hour), PayWithin: payWithin, Rebuy: true}
	if err := e.store.CreateActivity(ctx, &a); err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.engine.Load(ctx, a, nil); err != nil {
		e.t.Fatal(err)
	}
	return a
}

// buy has n new users grab a unit each and writes their orders as the
// worker does; it returns the orders as the database holds them:
// confirmed, with a deadline.
func (e *env) buy(a seckill.Activity, n int) []seckill.Order {
	e.t.Helper()
	ctx := context.Background()
	reqs := make([]seckill.OrderRequest, n)
	for i := range reqs {
		uid := e.users.Add(1)
		r, err := e.engine.Grab(ctx, a, uid)
		if err != nil {
			e.t.Fatal(err)
		}
		reqs[i] = seckill.OrderRequest{OrderID: r.OrderID, ActivityID: a.ID, UserID: uid,
			CreatedAt: seckill.OrderTime(a.StartsAt, r.OrderID)}
	}
	outs, err := e.store.ApplyOrders(ctx, reqs)
	if err != nil {
		e.t.Fatal(err)
	}
	orders := make([]seckill.Order, n)
	for i, o := range outs {
		if o.Status != seckill.OrderConfirmed {
			e.t.Fatalf("order of user %d: %+v, want confirmed", reqs[i].UserID, o)
		}
		orders[i] = e.order(reqs[i].OrderID)
		if orders[i].PayBy.IsZero() {
			e.t.Fatalf("order %d has no deadline", reqs[i].OrderID)
		}
	}
	return orders
}

func (e *env) order(id int64) seckill.Order {
	e.t.Helper()
	o, err := e.store.Order(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	return o
}

// count counts the orders in state s.
func (e *env) count(orders []seckill.Order, s seckill.OrderStatus) int {
	e.t.Helper()
	n := 0
	for _, o := range orders {
		if e.order(o.ID).Status == s {
			n++
		}
	}
	return n
}

// waitDue sleeps until every order's deadline has passed.
func waitDue(orders []seckill.Order) {
	var last time.Time
	for _, o := range orders {
		if o.PayBy.After(last) {
			last = o.PayBy
		}
	}
	time.Sleep(time.Until(last) + 10*time.Millisecond)
}

// accounted checks that every unit of a is accounted for: the database's
// remaining stock is the stock less the live orders, and Redis agrees.
func (e *env) accounted(a seckill.Activity) {
	e.t.Helper()
	ctx := context.Background()
	got, err := e.store.Activity(ctx, a.ID)
	if err != nil {
		e.t.Fatal(err)
	}
	counts, err := e.store.StateCounts(ctx, a.ID)
	if err != nil {
		e.t.Fatal(err)
	}
	live := counts[seckill.OrderConfirmed] + counts[seckill.OrderPaid]
	inRedis, err := e.engine.Remaining(ctx, a)
	if err != nil {
		e.t.Fatal(err)
	}
	if got.Remaining != a.Stock-live || inRedis != got.Remaining {
		e.t.Errorf("activity %d: stock %d, live orders %d, remaining %d in the database and %d in redis (counts %v)",
			a.ID, a.Stock, live, got.Remaining, inRedis, counts)
	}
}

// pending returns the returns whose Redis half is not recorded as done.
func (e *env) pending() []seckill.Return {
	e.t.Helper()
	rs, err := e.store.PendingReturns(context.Background(), 500)
	if err != nil {
		e.t.Fatal(err)
	}
	return rs
}

// job is one job running in the test, as a process would run it.
type job struct {
	m      *expiry.Metrics
	cancel context.CancelFunc
	done   chan struct{}
}

// start runs a job on st (the env's store, or a wrapper) and its own lock
// client on r (nil: the env's Redis), until the test ends or stop.
func (e *env) start(name string, cfg expiry.Config, st seckill.Store, stk expiry.Stock, r lock.Redis) *job {
	e.t.Helper()
	if r == nil {
		r = goredislock.New(e.rdb)
	}
	locks := lock.New(r, lock.WithPrefix(e.prefix+":lock"))
	cfg.Name = e.prefix + ":expiry"
	if cfg.Lease == 0 {
		cfg.Lease = lease
	}
	if cfg.RepairAfter == 0 {
		cfg.RepairAfter = 100 * time.Millisecond
	}
	m := expiry.NewMetrics(nil)
	log := slog.New(slog.NewTextHandler(testWriter{e.t}, &slog.HandlerOptions{Level: slog.LevelDebug})).With("process", name)
	j, err := expiry.New(st, stk, locks, cfg, log, m)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	jb := &job{m: m, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(jb.done)
		defer locks.Close()
		if err := j.Run(ctx); err != nil {
			e.t.Errorf("%s: Run: %v", name, err)
		}
	}()
	e.t.Cleanup(jb.stop)
	return jb
}

// stop stops the job, which gives up the lead if it has it, and waits.
func (j *job) stop() { j.cancel(); <-j.done }

func (j *job) leading() bool { return value(j.m.Leader) == 1 }

func (j *job) expired() int { return int(value(j.m.Expired)) }

// value reads a counter or a gauge.
func value(m prometheus.Metric) float64 {
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		panic(err)
	}
	if d.Counter != nil {
		return d.Counter.GetValue()
	}
	return d.Gauge.GetValue()
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p[:len(p)-1]))
	return len(p), nil
}

// gate is a fault-injecting store: it holds a job's n-th Expire call until
// released, as if the job were paused in the middle of it, then makes the
// call with the arguments it was given and reports the outcome.
type gate struct {
	seckill.Store
	n       int32
	calls   atomic.Int32
	entered chan struct{}
	release chan struct{}
	outcome chan heldCall
}

type heldCall struct {
	fence seckill.Fence
	rets  []seckill.Return
	err   error
}

func newGate(st seckill.Store, n int32) *gate {
	return &gate{Store: st, n: n, entered: make(chan struct{}), release: make(chan struct{}), outcome: make(chan heldCall, 1)}
}

func (g *gate) Expire(ctx context.Context, f seckill.Fence, now time.Time, limit int) ([]seckill.Return, error) {
	if g.calls.Add(1) != g.n {
		return g.Store.Expire(ctx, f, now, limit)
	}
	close(g.entered)
	select {
	case <-g.release:
	case <-ctx.Done(): // the test ended early
		return nil, ctx.Err()
	}
	rets, err := g.Store.Expire(ctx, f, now, limit)
	g.outcome <- heldCall{f, rets, err}
	return rets, err
}

// pausable is a lock client's Redis that can be cut off, as from a paused
// or dead process: calls wait while it is paused.
type pausable struct {
	lock.Redis
	mu     sync.Mutex
	resume chan struct{} // closed while not paused
}

func newPausable(r lock.Redis) *pausable {
	p := &pausable{Redis: r, resume: make(chan struct{})}
	close(p.resume)
	return p
}

func (p *pausable) pause() {
	p.mu.Lock()
	p.resume = make(chan struct{})
	p.mu.Unlock()
}

func (p *pausable) unpause() {
	p.mu.Lock()
	close(p.resume)
	p.mu.Unlock()
}

func (p *pausable) wait(ctx context.Context) error {
	p.mu.Lock()
	c := p.resume
	p.mu.Unlock()
	select {
	case <-c:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *pausable) EvalSHA(ctx context.Context, sha1 string, keys, args []string) (int64, error) {
	if err := p.wait(ctx); err != nil {
		return 0, err
	}
	return p.Redis.EvalSHA(ctx, sha1, keys, args)
}

func (p *pausable) Eval(ctx context.Context, script string, keys, args []string) (int64, error) {
	if err := p.wait(ctx); err != nil {
		return 0, err
	}
	return p.Redis.Eval(ctx, script, keys, args)
}

func (p *pausable) EvalSHAStrings(ctx context.Context, sha1 string, keys, args []string) ([]string, error) {
	if err := p.wait(ctx); err != nil {
		return nil, err
	}
	return p.Redis.EvalSHAStrings(ctx, sha1, keys, args)
}

func (p *pausable) EvalStrings(ctx context.Context, script string, keys, args []string) ([]string, error) {
	if err := p.wait(ctx); err != nil {
		return nil, err
	}
	return p.Redis.EvalStrings(ctx, script, keys, args)
}

// TestFence: a leader is held in the middle of an expiry while its lease
// runs out (its Redis cut off, as for a paused process); a second leader
// takes over and expires one order (claiming the fence); then the first
// one's expiry runs, with the deadline-passed orders still there to take:
// the database must refuse it (ErrFenced) and it must write nothing. The
// first job then campaigns again, and the second expires the rest.
func TestFence(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *env) {
		a := e.sale(100, time.Second)
		orders := e.buy(a, 10)
		waitDue(orders)

		g1 := newGate(e.store, 1)
		r1 := newPausable(goredislock.New(e.rdb))
		j1 := e.start("j1", expiry.Config{}, g1, e.engine, r1)
		<-g1.entered
		if !j1.leading() {
			t.Fatal("j1 expires without leading")
		}
		r1.pause()

		// j2 expires one order per transaction, and is held at its second.
		g2 := newGate(e.store, 2)
		j2 := e.start("j2", expiry.Config{Batch: 1}, g2, e.engine, nil)
		start := time.Now()
		<-g2.entered
		t.Logf("j2 took over %v after j1 was cut off (lease %v)", time.Since(start).Round(time.Millisecond), lease)
		if n := e.count(orders, seckill.OrderExpired); n != 1 || j2.expired() != 1 {
			t.Fatalf("j2 leads: %d orders expired (j2 counts %d), want 1", n, j2.expired())
		}

		r1.unpause()
		close(g1.release)
		held := <-g1.outcome
		t.Logf("j1's held expiry, token %d: %d returns, err %v", held.fence.Token, len(held.rets), held.err)
		if !errors.Is(held.err, seckill.ErrFenced) || len(held.rets) != 0 {
			t.Fatalf("the stale leader's expiry returned %d returns and %v, want ErrFenced", len(held.rets), held.err)
		}
		if n := e.count(orders, seckill.OrderConfirmed); n != 9 {
			t.Fatalf("%d orders left confirmed after the stale expiry, want 9", n)
		}
		testenv.WaitFor(t, "j1 counts the fenced write and stops leading", func() bool {
			return value(j1.m.Fenced) == 1 && !j1.leading()
		})

		close(g2.release)
		testenv.WaitFor(t, "j2 expires the rest", func() bool { return j2.expired() == 10 })
		if n := e.count(orders, seckill.OrderExpired); n != 10 || j1.expired() != 0 {
			t.Errorf("%d orders expired, j1 counts %d: want 10 and 0", n, j1.expired())
		}
		testenv.WaitFor(t, "the returns are restocked", func() bool { return len(e.pending()) == 0 })
		e.accounted(a)
	})
}

// TestFailover: three jobs, one leads. The leader stops (and hands the
// lock over); then the next leader dies (its Redis cut off: it can neither
// renew nor release): the third takes over within the lease, and expires
// the orders. At no sampled moment do two jobs lead.
func TestFailover(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *env) {
		var jobs []*job
		var links []*pausable
		for i := range 3 {
			links = append(links, newPausable(goredislock.New(e.rdb)))
			jobs = append(jobs, e.start("j"+string(rune('1'+i)), expiry.Config{}, e.store, e.engine, links[i]))
		}
		// leader returns the job that leads, waiting for one, and fails on
		// two.
		var twice atomic.Int32
		stopWatch := make(chan struct{})
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			for {
				n := 0
				for _, j := range jobs {
					if j.leading() {
						n++
					}
				}
				if n > 1 {
					twice.Add(1)
				}
				select {
				case <-stopWatch:
					return
				case <-time.After(time.Millisecond):
				}
			}
		}()
		leader := func(not ...int) int {
			t.Helper()
			var who int
			testenv.WaitFor(t, "a leader", func() bool {
				for i, j := range jobs {
					if j.leading() && !contains(not, i) {
						who = i
						return true
					}
				}
				return false
			})
			return who
		}

		first := leader()
		start := time.Now()
		jobs[first].stop()
		second := leader(first)
		t.Logf("j%d stopped; j%d led %v later", first+1, second+1, time.Since(start).Round(time.Millisecond))

		links[second].pause()
		start = time.Now()
		jobs[second].cancel() // Run's release waits on the paused link: the lock stays taken
		third := leader(first, second)
		took := time.Since(start)
		t.Logf("j%d died; j%d led %v later (lease %v)", second+1, third+1, took.Round(time.Millisecond), lease)
		if took > lease+2*time.Second {
			// A correctness bound, not a speed one: the lease expires in
			// Redis after at most one lease, and the waiters' poll never
			// sleeps much past it; 2 s is slack for a loaded machine.
			t.Errorf("takeover %v after the leader died, want within the lease (%v) plus scheduling", took, lease)
		}
		links[second].unpause()
		<-jobs[second].done

		a := e.sale(10, time.Second)
		orders := e.buy(a, 5)
		testenv.WaitFor(t, "the new leader expires the orders", func() bool { return jobs[third].expired() == 5 })
		close(stopWatch)
		<-watched
		if n := twice.Load(); n > 0 {
			t.Errorf("two jobs led at once in %d samples", n)
		}
		if n := e.count(orders, seckill.OrderExpired); n != 5 {
			t.Errorf("%d of 5 orders expired", n)
		}
		testenv.WaitFor(t, "the returns are restocked", func() bool { return len(e.pending()) == 0 })
		e.accounted(a)
	})
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestPunctual: orders with deadlines spread over a few seconds, in two
// sales with different payment windows, are each expired within a few
// seconds after their deadline, never before. The bound (3 s, where the
// loop wakes at the earliest deadline or every second) is a correctness
// property of the loop on a loaded machine, not a speed measurement.
func TestPunctual(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *env) {
		j := e.start("j", expiry.Config{}, e.store, e.engine, nil)
		testenv.WaitFor(t, "the job leads", j.leading)
		sales := []seckill.Activity{e.sale(100, time.Second), e.sale(100, 2*time.Second)}
		var orders []seckill.Order
		for range 6 {
			for _, a := range sales {
				orders = append(orders, e.buy(a, 5)...)
			}
			time.Sleep(300 * time.Millisecond)
		}
		testenv.WaitFor(t, "every order expires", func() bool { return j.expired() == len(orders) })
		var worst time.Duration
		for _, o := range orders {
			got := e.order(o.ID)
			late := got.ClosedAt.Sub(got.PayBy)
			worst = max(worst, late)
			if got.Status != seckill.OrderExpired || late < 0 || late > 3*time.Second {
				t.Errorf("order %d: %s, deadline %v, closed %v (%v after)", o.ID, got.Status,
					got.PayBy.Format(time.StampMilli), got.ClosedAt.Format(time.StampMilli), late)
			}
		}
		t.Logf("%d orders expired, the latest %v after its deadline", len(orders), worst.Round(time.Millisecond))
		testenv.WaitFor(t, "the returns are restocked", func() bool { return len(e.pending()) == 0 })
		for _, a := range sales {
			e.accounted(a)
		}
	})
}

// crashing is a job's Redis half that crashes the job the first time it
// is called: the process dies between the database and the Redis halves.
type crashing struct {
	expiry.Stock
	crash func()
}

func (c crashing) Return(ctx context.Context, r seckill.Return) (stock.ReturnResult, error) {
	c.crash()
	return 0, errors.New("crashed")
}

// TestRepair: units whose database half was committed and whose Redis half
// was not (a cancel whose process died before Redis; an expiry job killed
// between the two) are given back to Redis exactly once by the next leader,
// with their buyers' marks.
func TestRepair(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		// A cancel whose Redis half never ran.
		kept := e.sale(10, time.Hour)
		keptOrders := e.buy(kept, 3)
		_, ret, err := e.store.Cancel(ctx, keptOrders[0].ID, keptOrders[0].UserID, time.Now())
		if err != nil || ret.OrderID != keptOrders[0].ID {
			t.Fatalf("cancel: %+v %v", ret, err)
		}
		// Orders that expire under a job that dies after the database half.
		lapsed := e.sale(10, time.Second)
		lapsedOrders := e.buy(lapsed, 2)
		var crashed *job
		ready := make(chan struct{})
		crashed = e.start("crashing", expiry.Config{RepairAfter: time.Hour},
			e.store, crashing{e.engine, func() { <-ready; crashed.cancel() }}, nil)
		close(ready)
		<-crashed.done
		if n := e.count(lapsedOrders, seckill.OrderExpired); n != 2 {
			t.Fatalf("%d of 2 orders expired before the crash", n)
		}
		if n := len(e.pending()); n != 3 {
			t.Fatalf("%d returns pending, want 3", n)
		}
		redisBefore := map[int64]int64{}
		for _, a := range []seckill.Activity{kept, lapsed} {
			if redisBefore[a.ID], err = e.engine.Remaining(ctx, a); err != nil {
				t.Fatal(err)
			}
		}

		j := e.start("j", expiry.Config{}, e.store, e.engine, nil)
		testenv.WaitFor(t, "the returns are repaired", func() bool { return len(e.pending()) == 0 })
		// A few more rounds: nothing more is given back.
		testenv.WaitFor(t, "a round", func() bool { return value(j.m.LastRun) > 0 })
		runs := value(j.m.LastRun)
		testenv.WaitFor(t, "more rounds", func() bool { return value(j.m.LastRun) > runs+1.5 })
		if n := value(j.m.Repaired); n != 3 || j.expired() != 0 {
			t.Errorf("repaired %v, expired %d: want 3 and 0", n, j.expired())
		}
		for _, c := range []struct {
			a    seckill.Activity
			back int64
		}{{kept, 1}, {lapsed, 2}} {
			got, err := e.engine.Remaining(ctx, c.a)
			if err != nil {
				t.Fatal(err)
			}
			if got != redisBefore[c.a.ID]+c.back {
				t.Errorf("activity %d: %d in redis, was %d before the repair: want %d back", c.a.ID, got, redisBefore[c.a.ID], c.back)
			}
			e.accounted(c.a)
		}
		// The returned orders' buyers may buy again; the others not.
		for _, o := range append(lapsedOrders, keptOrders...) {
			a := kept
			if o.ActivityID == lapsed.ID {
				a = lapsed
			}
			_, marked, err := e.engine.PendingOrder(ctx, a, o.ID, o.UserID)
			if err != nil {
				t.Fatal(err)
			}
			if returned := e.order(o.ID).Status != seckill.OrderConfirmed; marked == returned {
				t.Errorf("order %d (%s): buyer mark in redis %v", o.ID, e.order(o.ID).Status, marked)
			}
		}
	})
}

// flaky is a Redis half that fails while down is set, as an unreachable
// Redis does, and counts the returns it refused.
type flaky struct {
	expiry.Stock
	down    *atomic.Bool
	refused *atomic.Int64
}

func (f flaky) Return(ctx context.Context, r seckill.Return) (stock.ReturnResult, error) {
	if f.down.Load() {
		f.refused.Add(1)
		return 0, errors.New("redis unreachable")
	}
	return f.Stock.Return(ctx, r)
}

// TestRedisHalfDown: while the Redis half of returns fails, orders still
// expire on time in the database, and their returns wait in the database;
// once Redis answers again, the repair gives each unit back once.
func TestRedisHalfDown(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *env) {
		var down atomic.Bool
		var refused atomic.Int64
		down.Store(true)
		j := e.start("j", expiry.Config{}, e.store, flaky{e.engine, &down, &refused}, nil)
		a := e.sale(10, time.Second)
		inRedis, err := e.engine.Remaining(context.Background(), a)
		if err != nil {
			t.Fatal(err)
		}
		orders := e.buy(a, 4)
		testenv.WaitFor(t, "the orders expire", func() bool { return j.expired() == 4 })
		// The job gives the units back right after their orders expire,
		// and stops at the first refusal: Redis comes back once it refused
		// one, so that the repair returns at least that one (on a loaded
		// machine the expiry count could be seen before the attempt; if
		// the orders expired in two rounds, the second may be returned at
		// once, which is no repair).
		testenv.WaitFor(t, "the redis half refuses a return", func() bool { return refused.Load() >= 1 })
		if n := len(e.pending()); n != 4 {
			t.Fatalf("%d returns pending while the redis half fails, want 4", n)
		}
		down.Store(false)
		// The repair records the returns, then counts them: wait for both.
		testenv.WaitFor(t, "the returns are repaired", func() bool {
			return len(e.pending()) == 0 && value(j.m.Repaired) >= 1
		})
		if n := value(j.m.Repaired); n < 1 || n > 4 {
			t.Errorf("%v returns repaired, want 1 to 4", n)
		}
		if n := e.count(orders, seckill.OrderExpired); n != 4 {
			t.Errorf("%d of 4 orders expired", n)
		}
		if got, err := e.engine.Remaining(context.Background(), a); err != nil || got != inRedis {
			t.Errorf("redis holds %d (%v), want %d as before the sale", got, err, inRedis)
		}
		e.accounted(a)
	})
}
