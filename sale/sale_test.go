package sale_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/internal/rediscount"
	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/sale"
	"github.com/seckilldev/seckill/stock"
	"github.com/seckilldev/seckill/store"
)

// counted wraps the real store to count the calls the service makes to
// the database (all: every call, each one transaction or more) and some of
// them by name; every call goes to the database.
type counted struct {
	seckill.Store
	all, orders, activity, activities atomic.Int64
}

func (s *counted) CreateActivity(ctx context.Context, a *seckill.Activity) error {
	s.all.Add(1)
	return s.Store.CreateActivity(ctx, a)
}

func (s *counted) Activity(ctx context.Context, id int64) (seckill.Activity, error) {
	s.all.Add(1)
	s.activity.Add(1)
	return s.Store.Activity(ctx, id)
}

func (s *counted) Activities(ctx context.Context, since time.Time) ([]seckill.Activity, error) {
	s.all.Add(1)
	s.activities.Add(1)
	return s.Store.Activities(ctx, since)
}

func (s *counted) Buyers(ctx context.Context, id int64) ([]seckill.Buyer, error) {
	s.all.Add(1)
	return s.Store.Buyers(ctx, id)
}

func (s *counted) LastOrderID(ctx context.Context, id int64) (int64, error) {
	s.all.Add(1)
	return s.Store.LastOrderID(ctx, id)
}

func (s *counted) ApplyOrders(ctx context.Context, reqs []seckill.OrderRequest) ([]seckill.Outcome, error) {
	s.all.Add(1)
	return s.Store.ApplyOrders(ctx, reqs)
}

func (s *counted) FailOrders(ctx context.Context, reqs []seckill.OrderRequest, reason string) ([]seckill.Outcome, error) {
	s.all.Add(1)
	return s.Store.FailOrders(ctx, reqs, reason)
}

func (s *counted) Order(ctx context.Context, id int64) (seckill.Order, error) {
	s.all.Add(1)
	s.orders.Add(1)
	return s.Store.Order(ctx, id)
}

func (s *counted) Load(ctx context.Context, id int64) (seckill.Loaded, error) {
	s.all.Add(1)
	return s.Store.Load(ctx, id)
}

func (s *counted) Pay(ctx context.Context, p seckill.Payment) (seckill.Order, error) {
	s.all.Add(1)
	return s.Store.Pay(ctx, p)
}

func (s *counted) Cancel(ctx context.Context, oid, uid int64, now time.Time) (seckill.Order, seckill.Return, error) {
	s.all.Add(1)
	return s.Store.Cancel(ctx, oid, uid, now)
}

func (s *counted) Expire(ctx context.Context, f seckill.Fence, now time.Time, limit int) ([]seckill.Return, error) {
	s.all.Add(1)
	return s.Store.Expire(ctx, f, now, limit)
}

func (s *counted) NextDeadline(ctx context.Context) (time.Time, bool, error) {
	s.all.Add(1)
	return s.Store.NextDeadline(ctx)
}

func (s *counted) PendingReturns(ctx context.Context, limit int) ([]seckill.Return, error) {
	s.all.Add(1)
	return s.Store.PendingReturns(ctx, limit)
}

func (s *counted) Restocked(ctx context.Context, ids []int64) error {
	s.all.Add(1)
	return s.Store.Restocked(ctx, ids)
}

func (s *counted) UserOrders(ctx context.Context, uid int64, before seckill.Cursor, limit int) ([]seckill.Order, error) {
	s.all.Add(1)
	return s.Store.UserOrders(ctx, uid, before, limit)
}

func (s *counted) StateCounts(ctx context.Context, id int64) (seckill.StateCounts, error) {
	s.all.Add(1)
	return s.Store.StateCounts(ctx, id)
}

func (s *counted) Ping(ctx context.Context) error {
	s.all.Add(1)
	return s.Store.Ping(ctx)
}

// sales is one database and one Redis namespace shared by the instances.
type sales struct {
	store  seckill.Store
	addr   string
	prefix string
}

func newSales(t *testing.T) *sales {
	t.Helper()
	st, err := store.Open(context.Background(), testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return &sales{store: st, addr: testenv.RedisAddr(t), prefix: testenv.Prefix(t)}
}

// instance is one API process: its own Redis client, engine and service.
type instance struct {
	svc     *sale.Service
	engine  *stock.Engine
	cmds    *rediscount.Counter
	store   *counted
	metrics *sale.Metrics
}

// trio starts the three instances of the sold-out tests: a; b, which
// changes its mind about a sell-out only on a restock message (its recheck
// is an hour away); c, which hears no restock message (its 1s recheck).
func (s *sales) trio(t *testing.T) (a, b, c *instance) {
	t.Helper()
	a = s.instance(t, sale.Config{})
	b = s.instance(t, sale.Config{SoldOutRecheck: time.Hour})
	b.run(t)
	c = s.instance(t, sale.Config{})
	return a, b, c
}

func (s *sales) instance(t *testing.T, cfg sale.Config) *instance {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: s.addr})
	t.Cleanup(func() { rdb.Close() })
	in := &instance{cmds: &rediscount.Counter{}, store: &counted{Store: s.store}, metrics: sale.NewMetrics(nil)}
	rdb.AddHook(in.cmds)
	in.engine = stock.New(rdb, stock.Config{Prefix: s.prefix})
	t.Cleanup(in.engine.Close)
	in.svc = sale.New(in.store, in.engine, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), in.metrics)
	return in
}

// run runs the instance's background work (restock messages) until t ends.
func (in *instance) run(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = in.svc.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
}

func (in *instance) create(t *testing.T, stockN int64) seckill.Activity {
	t.Helper()
	a := seckill.Activity{Name: "sale", Stock: stockN, StartsAt: time.Now().Add(-time.Minute), EndsAt: time.Now().Add(time.Hour)}
	if err := in.svc.CreateActivity(context.Background(), &a); err != nil {
		t.Fatal(err)
	}
	return a
}

func (in *instance) grab(t *testing.T, activityID, uid int64) (sale.Grabbed, error) {
	t.Helper()
	return in.svc.Grab(context.Background(), activityID, uid)
}

func (in *instance) mustGrab(t *testing.T, activityID, uid int64) sale.Grabbed {
	t.Helper()
	g, err := in.grab(t, activityID, uid)
	if err != nil {
		t.Fatalf("grab of activity %d by user %d: %v", activityID, uid, err)
	}
	return g
}

// value reads a counter.
func value(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

// TestOrderLookupManyActivities: with 300 live sales in Redis, looking up
// an order costs at most one pipelined Redis round trip (two commands; an
// EXISTS before for an activity the instance does not know yet) and one
// read of the database by primary key (two with the activity, read once
// per instance), whether the order is pending, unknown or of an activity
// that does not exist; an id Redis never issued costs no read at all. The
// owner, another user and an admin each get the right answer.
func TestOrderLookupManyActivities(t *testing.T) {
	s := newSales(t)
	ctx := context.Background()
	a := s.instance(t, sale.Config{})
	var acts []seckill.Activity
	for range 300 {
		acts = append(acts, a.create(t, 100))
	}
	target := acts[150]
	g := a.mustGrab(t, target.ID, 42)
	if !g.New || seckill.OrderActivity(g.OrderID) != target.ID {
		t.Fatalf("grab: %+v, want a new order of activity %d", g, target.ID)
	}

	b := s.instance(t, sale.Config{}) // knows no activity yet
	cases := []struct {
		name       string
		oid, uid   int64
		code       string // "" for found
		owner      int64
		maxRedis   int64
		maxDBReads int64 // orders, activity listings
	}{
		{"the owner's pending order", g.OrderID, 42, "", 42, 3, 1},
		{"an admin's lookup of a pending order", g.OrderID, 0, "", 42, 2, 1},
		{"another user's order", g.OrderID, 7, seckill.ENOTFOUND, 0, 2, 1},
		{"an order beyond the last issued, asked by a user", g.OrderID + 1000, 42, seckill.ENOTFOUND, 0, 2, 0},
		{"an order beyond the last issued, asked by an admin", g.OrderID + 1000, 0, seckill.ENOTFOUND, 0, 2, 0},
		{"an order of an activity that does not exist", seckill.OrderID(target.ID+10_000, 8), 42, seckill.ENOTFOUND, 0, 1, 1},
		{"an impossible local id", seckill.OrderID(target.ID, seckill.MaxOrderLocal), 0, seckill.ENOTFOUND, 0, 0, 0},
		{"an id without a local part", seckill.OrderID(target.ID, 0), 0, seckill.ENOTFOUND, 0, 0, 0},
	}
	for _, in := range []*instance{b, a} {
		// A new connection's handshake (HELLO, CLIENT SETINFO) is not the
		// lookup's: go-redis may open a second one for a pipeline.
		if err := in.engine.Client().Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := in.engine.Client().Pipelined(ctx, func(p redis.Pipeliner) error { return p.Ping(ctx).Err() }); err != nil {
			t.Fatal(err)
		}
		for _, c := range cases {
			redisBefore, ordersBefore, actBefore, listBefore := in.cmds.N(), in.store.orders.Load(), in.store.activity.Load(), in.store.activities.Load()
			o, err := in.svc.Order(ctx, c.oid, c.uid)
			redisCmds := in.cmds.N() - redisBefore
			dbReads := in.store.orders.Load() - ordersBefore + in.store.activities.Load() - listBefore
			actReads := in.store.activity.Load() - actBefore
			if got := seckill.ErrorCode(err); got != c.code {
				t.Errorf("%s: got %v, want code %q", c.name, err, c.code)
			}
			if c.code == "" && (o.Status != seckill.OrderPending || o.UserID != c.owner || o.ActivityID != target.ID ||
				!o.CreatedAt.Equal(seckill.OrderTime(target.StartsAt, c.oid)) || time.Since(o.CreatedAt) > time.Minute) {
				t.Errorf("%s: got %+v, want pending of user %d in activity %d, created at the grab", c.name, o, c.owner, target.ID)
			}
			if redisCmds > c.maxRedis {
				t.Errorf("%s: %d redis commands, want at most %d", c.name, redisCmds, c.maxRedis)
			}
			if dbReads > c.maxDBReads {
				t.Errorf("%s: %d database reads, want at most %d", c.name, dbReads, c.maxDBReads)
			}
			t.Logf("%s: %d redis commands, %d database reads (and %d of the activity)", c.name, redisCmds, dbReads, actReads)
		}
		// The activity is read once per instance, on its first lookup.
		if n := in.store.activity.Load(); n != 1 {
			t.Errorf("lookups read the activity %d times, want once", n)
		}
	}
}

// TestSoldOutBuyerToldOrder: two instances on the same Redis and database.
// Instance A sells the stock out; instance B, which never answered the
// buyers, learns that the sale is sold out from a non-buyer's click and
// takes the buyers' snapshot. Then a buyer clicking on B gets their order,
// a non-buyer gets sold_out from memory (not one Redis command), and an
// order that fails on A's side (its unit given back) is seen by B at once
// (restock message) and by an instance without the message within a
// recheck (epoch).
func TestSoldOutBuyerToldOrder(t *testing.T) {
	s := newSales(t)
	ctx := context.Background()
	a, b, c := s.trio(t)
	act := a.create(t, 3)
	orders := map[int64]int64{}
	for uid := int64(1); uid <= 3; uid++ {
		orders[uid] = a.mustGrab(t, act.ID, uid).OrderID
	}
	for _, in := range []*instance{b, c} {
		if _, err := in.grab(t, act.ID, 100); !errors.Is(err, stock.ErrSoldOut) {
			t.Fatalf("a non-buyer's grab after the sell-out: %v, want sold out", err)
		}
		testenv.WaitFor(t, "buyer snapshot taken", func() bool { return value(in.metrics.Snapshots) == 1 })
	}

	for uid := int64(1); uid <= 3; uid++ {
		if g := b.mustGrab(t, act.ID, uid); g.New || g.OrderID != orders[uid] {
			t.Errorf("buyer %d clicking on B after the sell-out: %+v, want their order %d", uid, g, orders[uid])
		}
	}
	before := b.cmds.N()
	for uid := int64(101); uid <= 200; uid++ {
		if _, err := b.grab(t, act.ID, uid); !errors.Is(err, stock.ErrSoldOut) {
			t.Fatalf("non-buyer %d on B: %v, want sold out", uid, err)
		}
	}
	if g := b.mustGrab(t, act.ID, 2); g.OrderID != orders[2] {
		t.Errorf("buyer 2 again: %+v", g)
	}
	if n := b.cmds.N() - before; n != 0 {
		t.Errorf("100 non-buyers and a buyer on sold-out B sent %d redis commands, want 0", n)
	}

	// User 3's order fails in the database; the worker gives its unit back
	// (as the worker does: record the failure, then compensate).
	req := seckill.OrderRequest{OrderID: orders[3], ActivityID: act.ID, UserID: 3, CreatedAt: time.Now()}
	if _, err := s.store.FailOrders(ctx, []seckill.OrderRequest{req}, seckill.ReasonPoison); err != nil {
		t.Fatal(err)
	}
	if done, err := a.engine.Compensate(ctx, act, 3, orders[3], 0); err != nil || !done {
		t.Fatalf("compensate: %v %v", done, err)
	}
	var again int64
	took := testenv.WaitFor(t, "B sees the unit come back", func() bool {
		g, err := b.grab(t, act.ID, 3)
		if err == nil && g.OrderID == orders[3] {
			return false // still the snapshot
		}
		if err != nil || !g.New {
			t.Fatalf("user 3 on B after the restock: %+v %v, want a new order", g, err)
		}
		again = g.OrderID
		return true
	})
	t.Logf("B (restock message) saw the compensation after %s", took)
	if o, err := b.svc.Order(ctx, orders[3], 3); err != nil || o.Status != seckill.OrderFailed {
		t.Errorf("the failed order: %+v %v, want failed", o, err)
	}
	took = testenv.WaitFor(t, "C (recheck) drops its snapshot", func() bool {
		g, err := c.grab(t, act.ID, 3)
		return err == nil && g.OrderID == again
	})
	t.Logf("C (recheck, no restock message) saw the change after %s", took)
	if g := c.mustGrab(t, act.ID, 1); g.OrderID != orders[1] {
		t.Errorf("buyer 1 on C: %+v, want %d", g, orders[1])
	}
}

// TestSoldOutTooManyBuyers: above SnapshotLimit an instance holds no
// snapshot; it asks Redis for the users it does not remember, and every
// answer is still true.
func TestSoldOutTooManyBuyers(t *testing.T) {
	s := newSales(t)
	a := s.instance(t, sale.Config{})
	b := s.instance(t, sale.Config{SnapshotLimit: 2})
	act := a.create(t, 3)
	orders := map[int64]int64{}
	for uid := int64(1); uid <= 3; uid++ {
		orders[uid] = a.mustGrab(t, act.ID, uid).OrderID
	}
	for uid := int64(100); uid <= 110; uid++ {
		if _, err := b.grab(t, act.ID, uid); !errors.Is(err, stock.ErrSoldOut) {
			t.Fatalf("non-buyer %d: %v, want sold out", uid, err)
		}
	}
	for uid := int64(1); uid <= 3; uid++ {
		if g := b.mustGrab(t, act.ID, uid); g.OrderID != orders[uid] {
			t.Errorf("buyer %d: %+v, want %d", uid, g, orders[uid])
		}
	}
	if n := value(b.metrics.Snapshots); n != 0 {
		t.Errorf("%v snapshots above the limit, want 0", n)
	}
}

// TestIDsContinueAfterRedisLoss: Redis loses the activity; the rebuild
// issues ids past every id the database holds for it, failed orders
// included, and the confirmed buyers keep their orders.
func TestIDsContinueAfterRedisLoss(t *testing.T) {
	s := newSales(t)
	ctx := context.Background()
	a := s.instance(t, sale.Config{})
	act := a.create(t, 10)
	var reqs []seckill.OrderRequest
	for uid := int64(1); uid <= 3; uid++ {
		g := a.mustGrab(t, act.ID, uid)
		reqs = append(reqs, seckill.OrderRequest{OrderID: g.OrderID, ActivityID: act.ID, UserID: uid, CreatedAt: time.Now()})
	}
	if _, err := s.store.ApplyOrders(ctx, reqs); err != nil { // as the worker would
		t.Fatal(err)
	}
	// A failed order whose id ran far ahead (a burst borrowed ids from
	// the future), written before Redis was lost.
	ahead := seckill.OrderID(act.ID, 80_000_000)
	failed := seckill.OrderRequest{OrderID: ahead, ActivityID: act.ID, UserID: 9, CreatedAt: time.Now()}
	if _, err := s.store.FailOrders(ctx, []seckill.OrderRequest{failed}, seckill.ReasonPoison); err != nil {
		t.Fatal(err)
	}
	k := a.engine.Keys(act)[0]
	if err := a.engine.Client().Del(ctx, k.Meta, k.Buyers, k.Orders).Err(); err != nil {
		t.Fatal(err)
	}
	b := s.instance(t, sale.Config{})
	if _, err := b.grab(t, act.ID, 4); seckill.ErrorCode(err) != seckill.EUNAVAILABLE {
		t.Fatalf("grab of a lost activity: %v, want unavailable while it is rebuilt", err)
	}
	var g sale.Grabbed
	testenv.WaitFor(t, "activity rebuilt", func() bool {
		var err error
		g, err = b.grab(t, act.ID, 4)
		return err == nil
	})
	if !g.New || g.OrderID <= ahead {
		t.Errorf("first order after the rebuild: %+v, want a new order after %d", g, ahead)
	}
	if g := b.mustGrab(t, act.ID, 2); g.New || g.OrderID != reqs[1].OrderID {
		t.Errorf("confirmed buyer after the rebuild: %+v, want their order %d", g, reqs[1].OrderID)
	}
}

// TestCreateActivityWindow: a sale longer than 366 days is refused.
func TestCreateActivityWindow(t *testing.T) {
	s := newSales(t)
	a := s.instance(t, sale.Config{})
	now := time.Now()
	for _, tt := range []struct {
		d    time.Duration
		code string
	}{
		{seckill.MaxSaleWindow, ""},
		{seckill.MaxSaleWindow + time.Millisecond, seckill.EINVALID},
	} {
		act := seckill.Activity{Name: "long", Stock: 1, StartsAt: now, EndsAt: now.Add(tt.d)}
		if err := a.svc.CreateActivity(context.Background(), &act); seckill.ErrorCode(err) != tt.code {
			t.Errorf("window of %v: got %v, want %q", tt.d, err, tt.code)
		}
	}
}
