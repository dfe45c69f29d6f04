package stock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/stock"
)

// engineOn returns an engine on rdb under a fresh prefix.
func engineOn(t *testing.T, rdb redis.UniversalClient, cfg stock.Config) *stock.Engine {
	t.Helper()
	t.Cleanup(func() { rdb.Close() })
	cfg.Prefix = testenv.Prefix(t)
	e := stock.New(rdb, cfg)
	t.Cleanup(e.Close)
	return e
}

// dialEngine returns an engine on a client of stock.Dial.
func dialEngine(t *testing.T, url string, cfg stock.Config) *stock.Engine {
	t.Helper()
	rdb, err := stock.Dial(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	return engineOn(t, rdb, cfg)
}

// wantCode fails t unless err carries the error code want (and wraps the
// matching stock error, for the two that say what became of a grab).
func wantCode(t *testing.T, what string, err error, want string) {
	t.Helper()
	if got := seckill.ErrorCode(err); got != want {
		t.Fatalf("%s: %v (code %q), want code %q", what, err, got, want)
	}
	switch want {
	case seckill.EUNAVAILABLE:
		if !errors.Is(err, stock.ErrUnavailable) {
			t.Fatalf("%s: %v does not wrap stock.ErrUnavailable", what, err)
		}
	case seckill.EOUTCOMEUNKNOWN:
		if !errors.Is(err, stock.ErrOutcomeUnknown) {
			t.Fatalf("%s: %v does not wrap stock.ErrOutcomeUnknown", what, err)
		}
	}
}

// buyerOn reads user uid's buyer mark from one node (a replica too: READONLY
// lets a cluster replica answer for its master's slots).
func buyerOn(t *testing.T, addr string, cluster bool, e *stock.Engine, a seckill.Activity, uid int64) string {
	t.Helper()
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	conn := c.Conn()
	defer conn.Close()
	if cluster {
		if err := conn.ReadOnly(ctx).Err(); err != nil {
			t.Fatalf("READONLY on %s: %v", addr, err)
		}
	}
	v, err := conn.HGet(ctx, e.Keys(a)[stock.Home(uid, a.BucketCount())].Buyers, strconv.FormatInt(uid, 10)).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatalf("read buyer %d on %s: %v", uid, addr, err)
	}
	return v
}

// local is the local part of an order id, as a buyer mark holds it.
func local(oid int64) string { return strconv.FormatInt(seckill.OrderLocal(oid), 10) }

// ackCase is one deployment for the durable-yes tests: a master that holds
// the activity and its replica.
type ackCase struct {
	engine           *stock.Engine
	master, replica  *testenv.RedisServer
	cluster          bool
	activity         seckill.Activity
	stopped, resumed func()
}

// checkDurableYes: with AckReplicas 1 a grab answered with its order is on
// the replica when it is answered. With the replica frozen, a grab answers
// outcome_unknown, not unavailable (it ran on the master); so does a
// holder's grab, whose order the frozen replica may lack. Once the replica
// is back, that user's next grab answers the order the unknown grab took.
func checkDurableYes(t *testing.T, c ackCase) {
	ctx := context.Background()
	for uid := int64(1); uid <= 3; uid++ {
		res, err := c.engine.Grab(ctx, c.activity, uid)
		if err != nil || !res.New {
			t.Fatalf("grab by user %d: %+v %v", uid, res, err)
		}
		// WAIT returned: the replica acknowledged these writes, so it
		// answers them now, without polling.
		if got := buyerOn(t, c.replica.Addr, c.cluster, c.engine, c.activity, uid); got != local(res.OrderID) {
			t.Fatalf("replica holds buyer %d as %q right after the answer, want %q", uid, got, local(res.OrderID))
		}
	}

	c.stopped()
	start := time.Now()
	_, err := c.engine.Grab(ctx, c.activity, 4)
	wantCode(t, "grab while the replica is frozen", err, seckill.EOUTCOMEUNKNOWN)
	t.Logf("a grab with the replica frozen answered outcome_unknown after %s: %v", time.Since(start).Round(time.Millisecond), err)
	mark := buyerOn(t, c.master.Addr, false, c.engine, c.activity, 4)
	if mark == "" {
		t.Fatal("the master holds no order for user 4: the grab answered unknown did not run")
	}
	_, err = c.engine.Grab(ctx, c.activity, 1)
	wantCode(t, "a holder's grab while the replica is frozen", err, seckill.EOUTCOMEUNKNOWN)
	c.resumed()

	// The replica catches up; the user asks again and learns the order.
	var res stock.Result
	took := testenv.WaitFor(t, "user 4's next grab answers its order", func() bool {
		res, err = c.engine.Grab(ctx, c.activity, 4)
		return err == nil
	})
	t.Logf("user 4's next grab answered its order %s after the replica was resumed", took.Round(time.Millisecond))
	if res.New || local(res.OrderID) != mark {
		t.Fatalf("user 4's next grab: %+v, want the order the unknown grab took (local %s), not new", res, mark)
	}
	if got := buyerOn(t, c.replica.Addr, c.cluster, c.engine, c.activity, 4); got != mark {
		t.Fatalf("the replica holds user 4's order as %q, want %q", got, mark)
	}
}

func freeze(t *testing.T, s *testenv.RedisServer) (stop, resume func()) {
	var once sync.Once
	cont := func() { once.Do(func() { _ = s.Signal(syscall.SIGCONT) }) }
	t.Cleanup(cont) // a test that fails while the server is frozen must not leave it so
	return func() {
		if err := s.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}, cont
}

func TestAckReplicas(t *testing.T) {
	master, replica := testenv.StartReplicated(t)
	e := engineOn(t, redis.NewClient(&redis.Options{Addr: master.Addr}), stock.Config{AckReplicas: 1})
	load(t, e, openActivity(1, 100), nil)
	stop, resume := freeze(t, replica)
	checkDurableYes(t, ackCase{engine: e, master: master, replica: replica, activity: seckill.Activity{ID: 1}, stopped: stop, resumed: resume})

	// A sold-out activity's buyer snapshot answers its buyers with their
	// orders: it is refused while the replicas may lack some.
	ctx := context.Background()
	load(t, e, openActivity(2, 2), nil)
	two := seckill.Activity{ID: 2}
	grab(t, e, two, 1)
	grab(t, e, two, 2)
	stop, resume = freeze(t, replica)
	stop()
	_, err := e.SoldOutSnapshot(ctx, two, 100)
	wantCode(t, "snapshot with the replica frozen", err, seckill.EOUTCOMEUNKNOWN)
	resume()
	snap, err := e.SoldOutSnapshot(ctx, two, 100)
	if err != nil || snap.Len() != 2 {
		t.Fatalf("snapshot with the replica back: %v, %v", snap, err)
	}
}

// TestAckReplicasBuckets: the same with the stock in buckets; and a unit
// borrowed from another bucket is taken out of it only once the replica
// holds the transfer: with the replica frozen, a grab that needs a borrow
// is told unavailable (it took nothing), and once the replica is back the
// transfer is completed and sold.
func TestAckReplicasBuckets(t *testing.T) {
	master, replica := testenv.StartReplicated(t)
	e := engineOn(t, redis.NewClient(&redis.Options{Addr: master.Addr}), stock.Config{AckReplicas: 1})
	a := bucketed(1, 100, 8)
	load(t, e, a, nil)
	stop, resume := freeze(t, replica)
	checkDurableYes(t, ackCase{engine: e, master: master, replica: replica, activity: a, stopped: stop, resumed: resume})

	ctx := context.Background()
	b := bucketed(2, 4, 4)
	load(t, e, b, nil)
	var homed []int64 // users of bucket 0, which holds one unit
	for uid := int64(1); len(homed) < 5; uid++ {
		if stock.Home(uid, 4) == 0 {
			homed = append(homed, uid)
		}
	}
	grab(t, e, b, homed[0])
	stop, resume = freeze(t, replica)
	stop()
	_, err := e.Grab(ctx, b, homed[1])
	wantCode(t, "a grab that needs a borrow with the replica frozen", err, seckill.EUNAVAILABLE)
	resume()
	var res stock.Result
	testenv.WaitFor(t, "the grab goes through once the replica is back", func() bool {
		res, err = e.Grab(ctx, b, homed[1])
		return err == nil
	})
	if !res.New {
		t.Fatalf("grab after the replica came back: %+v, want a new order", res)
	}
	if got := buyerOn(t, replica.Addr, false, e, b, homed[1]); got != local(res.OrderID) {
		t.Fatalf("replica holds the borrower's mark as %q right after the answer, want %q", got, local(res.OrderID))
	}
	for _, uid := range homed[2:4] {
		if r := grab(t, e, b, uid); !r.New {
			t.Fatalf("user %d: %+v, want a new order", uid, r)
		}
	}
	if _, err := e.Grab(ctx, b, homed[4]); !errors.Is(err, stock.ErrSoldOut) {
		t.Fatalf("fifth grab of 4 units: %v, want sold out", err)
	}
	if left, err := e.RemainingByBucket(ctx, b); err != nil || fmt.Sprint(left) != "[0 0 0 0]" {
		t.Fatalf("after the sell-out: %v %v, want every bucket empty", left, err)
	}
}

// TestAckReplicasSentinel: the same through Sentinel (go-redis' failover
// client, a plain client on the master it is told of).
func TestAckReplicasSentinel(t *testing.T) {
	master, replica := testenv.StartReplicated(t)
	sentinel := testenv.StartSentinel(t, master, 1)
	e := dialEngine(t, "redis+sentinel://"+sentinel.Addr+"/"+sentinel.MasterName, stock.Config{AckReplicas: 1})
	load(t, e, openActivity(1, 100), nil)
	stop, resume := freeze(t, replica)
	checkDurableYes(t, ackCase{engine: e, master: master, replica: replica, activity: seckill.Activity{ID: 1}, stopped: stop, resumed: resume})
}

// TestAckReplicasCluster: the same on Redis Cluster, where WAIT must go to
// the master that ran the script (a cluster client would send a keyless
// WAIT to any node).
func TestAckReplicasCluster(t *testing.T) {
	cl := testenv.StartClusterReplicas(t, 3, 1, 3*time.Second)
	e := dialEngine(t, "redis+cluster://"+cl.Addr(), stock.Config{AckReplicas: 1})
	const activity = 7
	load(t, e, openActivity(activity, 100), nil)
	master := cl.MasterOf(t, e.Keys(seckill.Activity{ID: activity})[0].Meta)
	replicas := cl.ReplicasOf(t, master)
	if master == nil || len(replicas) != 1 {
		t.Fatalf("activity %d: master %v with replicas %v, want one", activity, master, replicas)
	}
	stop, resume := freeze(t, replicas[0])
	checkDurableYes(t, ackCase{engine: e, master: master, replica: replicas[0], cluster: true, activity: seckill.Activity{ID: activity},
		stopped: stop, resumed: resume})
}

// TestGrabOutcomes: a grab Redis never received answers unavailable; one
// Redis received but did not answer in time answers outcome_unknown, and
// is not sent again (its user's next grab tells what it did).
func TestGrabOutcomes(t *testing.T) {
	ctx := context.Background()
	t.Run("down", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close() // nothing listens: every dial is refused
		e := engineOn(t, redis.NewClient(&redis.Options{Addr: addr}), stock.Config{RetryFor: 300 * time.Millisecond})
		start := time.Now()
		_, err = e.Grab(ctx, seckill.Activity{ID: 1}, 1)
		wantCode(t, "grab with redis down", err, seckill.EUNAVAILABLE)
		t.Logf("answered unavailable after %s (retried for 300ms): %v", time.Since(start).Round(time.Millisecond), err)
	})
	t.Run("frozen", func(t *testing.T) {
		srv := testenv.StartRedis(t)
		var sent atomic.Int64
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: 500 * time.Millisecond})
		rdb.AddHook(countEvals{&sent})
		e := engineOn(t, rdb, stock.Config{})
		load(t, e, openActivity(1, 10), nil)
		a := seckill.Activity{ID: 1}
		grab(t, e, a, 1)
		stop, resume := freeze(t, srv)
		stop()
		before := sent.Load()
		start := time.Now()
		_, err := e.Grab(ctx, a, 2)
		wantCode(t, "grab with redis frozen", err, seckill.EOUTCOMEUNKNOWN)
		t.Logf("answered outcome_unknown after %s: %v", time.Since(start).Round(time.Millisecond), err)
		if n := sent.Load() - before; n != 1 {
			t.Errorf("the grab was sent %d times, want once: a grab that may have run is never sent again", n)
		}
		resume()
		// Redis read the grab before it noticed the client had gone: it
		// ran, and the next grab says so (or, had it not, takes a unit
		// now). Either way the answer is an order.
		var res stock.Result
		testenv.WaitFor(t, "user 2's next grab answers", func() bool {
			res, err = e.Grab(ctx, a, 2)
			return err == nil
		})
		t.Logf("user 2's next grab: new=%v (false: the frozen grab had run)", res.New)
		if got := buyerOn(t, srv.Addr, false, e, a, 2); got != local(res.OrderID) {
			t.Fatalf("redis holds user 2's order as %q, the grab answered %d", got, res.OrderID)
		}
	})
}

// countEvals counts the grab script calls a client sends.
type countEvals struct{ n *atomic.Int64 }

func (countEvals) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c countEvals) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "evalsha" || cmd.Name() == "eval" {
			c.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (c countEvals) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestClusterFailover: a sale whose master is killed answers again soon
// after its replica's promotion, not at go-redis' next periodic reload of
// the slot map: the errors of the dead node make the engine reload it.
func TestClusterFailover(t *testing.T) {
	cl := testenv.StartClusterReplicas(t, 3, 1, 2*time.Second)
	e := dialEngine(t, "redis+cluster://"+cl.Addr(), stock.Config{})
	const activity = 3
	load(t, e, openActivity(activity, 1_000_000), nil)
	a := seckill.Activity{ID: activity}
	master := cl.MasterOf(t, e.Keys(a)[0].Meta)
	failover(t, e, a, master, func() string { return cl.WaitPromoted(t, e.Keys(a)[0].Meta, master).Addr })
}

// TestSentinelFailover: through Sentinel, a sale answers again once the
// failover client hears of the new master.
func TestSentinelFailover(t *testing.T) {
	master, _ := testenv.StartReplicated(t)
	sentinel := testenv.StartSentinel(t, master, 1)
	e := dialEngine(t, "redis+sentinel://"+sentinel.Addr+"/"+sentinel.MasterName, stock.Config{})
	load(t, e, openActivity(1, 1_000_000), nil)
	failover(t, e, seckill.Activity{ID: 1}, master, func() string { return sentinel.WaitFailover(t, master) })
}

// failover kills master under a crowd of 8 grabs at a time (each a new
// user) of the activity, waits for promoted to name the new master, and
// measures how long until the sale answers again; it fails t past 20s.
func failover(t *testing.T, e *stock.Engine, activity seckill.Activity, master *testenv.RedisServer, promoted func() string) {
	t.Helper()
	grab(t, e, activity, 1)
	ctx, cancel := context.WithCancel(context.Background())
	var (
		uid                  atomic.Int64
		killedAt, firstOK    atomic.Int64 // unix nanoseconds; firstOK: the first success of a grab sent after the kill
		okBefore             atomic.Bool
		unavailable, unknown atomic.Int64
		wg                   sync.WaitGroup
	)
	uid.Store(1)
	killedAt.Store(1 << 62)
	for range 8 {
		wg.Go(func() {
			for ctx.Err() == nil {
				rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
				start := time.Now().UnixNano()
				_, err := e.Grab(rctx, activity, uid.Add(1))
				rcancel()
				switch seckill.ErrorCode(err) {
				case "":
					okBefore.Store(true)
					if start > killedAt.Load() {
						firstOK.CompareAndSwap(0, time.Now().UnixNano())
					}
				case seckill.EUNAVAILABLE:
					unavailable.Add(1)
				case seckill.EOUTCOMEUNKNOWN:
					unknown.Add(1)
				default:
					if ctx.Err() == nil {
						t.Errorf("grab: %v", err)
					}
					return
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	defer func() { cancel(); wg.Wait() }()
	testenv.WaitFor(t, "grabs succeed before the kill", okBefore.Load)

	// The sale must be on the replicas before the kill (on a loaded machine
	// a replica can lag the load by seconds, and one promoted without the
	// activity answers "not loaded", which here nothing rebuilds).
	replicated(t, master)
	master.Kill() // returns once the process is gone
	killed := time.Now()
	killedAt.Store(killed.UnixNano())
	addr := promoted()
	seen := time.Now()
	testenv.WaitFor(t, "the sale answers after the kill", func() bool { return firstOK.Load() != 0 })
	answered := time.Unix(0, firstOK.Load())
	// The promotion is seen by polling with redis-cli: the sale may answer
	// a little before the poll sees it (a negative figure).
	t.Logf("master %s killed; %s promoted, seen %s later; the sale's first success came %s after the kill, %s after the promotion was seen; "+
		"meanwhile %d grabs answered unavailable, %d outcome_unknown",
		master.Addr, addr, seen.Sub(killed).Round(time.Millisecond), answered.Sub(killed).Round(time.Millisecond),
		answered.Sub(seen).Round(time.Millisecond), unavailable.Load(), unknown.Load())
	if d := answered.Sub(seen); d > 20*time.Second {
		t.Fatalf("the sale answered again %s after the promotion, want well under 20s", d)
	}
}

// replicated waits until every replica of master has acknowledged the
// replication offset master had when called.
func replicated(t *testing.T, master *testenv.RedisServer) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: master.Addr})
	defer rdb.Close()
	offset := func(info, field string) []int64 {
		var out []int64
		for _, line := range strings.Split(info, "\r\n") {
			if field == "offset=" {
				if !strings.HasPrefix(line, "slave") {
					continue
				}
				for _, kv := range strings.Split(line, ",") {
					if v, ok := strings.CutPrefix(kv, field); ok {
						n, _ := strconv.ParseInt(v, 10, 64)
						out = append(out, n)
					}
				}
			} else if v, ok := strings.CutPrefix(line, field); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				out = append(out, n)
			}
		}
		return out
	}
	info := rdb.Info(context.Background(), "replication").Val()
	want := offset(info, "master_repl_offset:")
	if len(want) != 1 {
		t.Fatalf("no master_repl_offset in INFO of %s:\n%s", master.Addr, info)
	}
	testenv.WaitFor(t, "the replicas have the sale", func() bool {
		got := offset(rdb.Info(context.Background(), "replication").Val(), "offset=")
		if len(got) == 0 {
			return false
		}
		for _, n := range got {
			if n < want[0] {
				return false
			}
		}
		return true
	})
}
