package check_test

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/check"
	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/stock"
)

const activityID = 42

// o is the id of activity 42's order with local id n (see seckill.OrderID):
// the stream holds n, everything else the full id.
func o(n int64) int64 { return seckill.OrderID(activityID, n) }

// state is a sale's state as the database and Redis hold it, written
// straight into them: the store packages are not needed to test the
// checker, and a broken state is exactly what they would refuse to write.
type state struct {
	stock, remaining int64
	confirmed        [][2]int64 // {order id, user id}
	failed           [][2]int64
	noUniqueIndex    bool
	noRebuy          bool
	paidToo          int64 // an order that is not paid but carries paid_at
	// status holds the state of the orders in confirmed that are not
	// confirmed (paid, cancelled, expired); a paid order gets a paid_at.
	status map[int64]seckill.OrderStatus
	// returns lists order_returns rows: {order id, restocked (0 or 1)},
	// of the kind of the order's state.
	returns [][2]int64

	redisRemaining int64
	redisMissing   bool    // no remaining stock in Redis
	acked          []int64 // order ids in the stream, delivered and acknowledged
	delivered      []int64 // delivered, not acknowledged (in the pending list)
	undelivered    []int64 // added after the group's last delivered entry

	answers *check.Answers
}

// healthy is a sale of 5 where users 1-3 hold orders 101-103, user 4's
// order 104 failed, and the worker has caught up.
func healthy() state {
	return state{
		stock: 5, remaining: 2,
		confirmed:      [][2]int64{{o(101), 1}, {o(102), 2}, {o(103), 3}},
		failed:         [][2]int64{{o(104), 4}},
		redisRemaining: 2,
		acked:          []int64{o(101), o(102), o(103), o(104)},
		answers: &check.Answers{ByUser: map[int64][]int64{
			1: {o(101)}, 2: {o(102)}, 3: {o(103)}, 4: {o(104)},
		}},
	}
}

// lifecycle is healthy after the payment step: user 1 paid order 101, user
// 2 cancelled 102, 103 expired, and both units went back (to the database
// and to Redis).
func lifecycle() state {
	return healthy().with(func(s *state) {
		s.status = map[int64]seckill.OrderStatus{o(101): seckill.OrderPaid,
			o(102): seckill.OrderCancelled, o(103): seckill.OrderExpired}
		s.returns = [][2]int64{{o(102), 1}, {o(103), 1}}
		s.remaining, s.redisRemaining = 4, 4
	})
}

func (s state) with(f func(*state)) state {
	s.confirmed = slices.Clone(s.confirmed)
	s.failed = slices.Clone(s.failed)
	s.status = maps.Clone(s.status)
	s.returns = slices.Clone(s.returns)
	s.acked = slices.Clone(s.acked)
	if s.answers != nil {
		a := *s.answers
		a.ByUser = maps.Clone(a.ByUser)
		a.Uncertain = slices.Clone(a.Uncertain)
		s.answers = &a
	}
	f(&s)
	return s
}

// controls: each broken state must be reported by exactly the checks named.
var controls = []struct {
	name   string
	state  state
	failed []string
}{
	{"healthy", healthy(), nil},
	{"oversold", healthy().with(func(s *state) {
		s.stock, s.remaining, s.redisRemaining = 2, -1, -1
	}), []string{check.NoOversell}},
	{"duplicate buyer", healthy().with(func(s *state) {
		s.noUniqueIndex = true
		s.confirmed = append(s.confirmed, [2]int64{o(105), 1})
		s.remaining, s.redisRemaining = 1, 1
		s.acked = append(s.acked, o(105))
		s.answers.Uncertain = []int64{1} // so that order 105 is no phantom
	}), []string{check.NoDuplicate}},
	{"lost order", healthy().with(func(s *state) {
		s.answers.ByUser[5] = []int64{o(106)}
	}), []string{check.NoLostOrder}},
	{"pending orders", healthy().with(func(s *state) {
		s.answers.ByUser[5] = []int64{o(106)}
		s.answers.ByUser[6] = []int64{o(107)}
		s.delivered = []int64{o(106)}
		s.undelivered = []int64{o(107)}
		s.redisRemaining = 0
	}), []string{check.Drained}},
	{"phantom order", healthy().with(func(s *state) {
		s.confirmed = append(s.confirmed, [2]int64{o(107), 7})
		s.remaining, s.redisRemaining = 1, 1
		s.acked = append(s.acked, o(107))
	}), []string{check.NoPhantomOrder}},
	{"order of a user whose request timed out", healthy().with(func(s *state) {
		s.confirmed = append(s.confirmed, [2]int64{o(107), 7})
		s.remaining, s.redisRemaining = 1, 1
		s.acked = append(s.acked, o(107))
		s.answers.Uncertain = []int64{7}
	}), nil},
	{"order held by another user", healthy().with(func(s *state) {
		s.confirmed[0] = [2]int64{o(101), 9}
	}), []string{check.NoLostOrder, check.NoPhantomOrder}},
	{"database stock not conserved", healthy().with(func(s *state) {
		s.remaining = 3
	}), []string{check.Conservation}},
	{"redis stock not conserved", healthy().with(func(s *state) {
		s.redisRemaining = 3
	}), []string{check.Conservation}},
	{"redis stock missing", healthy().with(func(s *state) {
		s.redisMissing = true
	}), []string{check.Conservation}},
	{"redis stock below zero", healthy().with(func(s *state) {
		s.redisRemaining = -1
	}), []string{check.NoOversell, check.Conservation}},
	{"paid, cancelled and expired orders", lifecycle(), nil},
	{"return not yet given back to redis", lifecycle().with(func(s *state) {
		s.returns[0][1] = 0
		s.redisRemaining--
	}), nil},
	{"return given back to redis twice", lifecycle().with(func(s *state) {
		s.redisRemaining++
	}), []string{check.Conservation}},
	{"cancelled order without its return", lifecycle().with(func(s *state) {
		s.returns = s.returns[1:]
	}), []string{check.ReturnedOnce}},
	{"paid order returned", lifecycle().with(func(s *state) {
		s.returns = append(s.returns, [2]int64{o(101), 1})
	}), []string{check.ReturnedOnce}},
	{"payment recorded on an expired order", lifecycle().with(func(s *state) {
		s.paidToo = o(103)
	}), []string{check.ReturnedOnce}},
	{"second order where re-buying is forbidden", lifecycle().with(func(s *state) {
		s.noRebuy, s.noUniqueIndex = true, true
		s.confirmed = append(s.confirmed, [2]int64{o(105), 2})
		s.remaining, s.redisRemaining = 3, 3
		s.acked = append(s.acked, o(105))
		s.answers.ByUser[2] = []int64{o(102), o(105)}
	}), []string{check.NoDuplicate, check.OneOrderID}},
	{"re-buy after a cancel", lifecycle().with(func(s *state) {
		s.noUniqueIndex = true
		s.confirmed = append(s.confirmed, [2]int64{o(105), 2})
		s.remaining, s.redisRemaining = 3, 3
		s.acked = append(s.acked, o(105))
		s.answers.ByUser[2] = []int64{o(102), o(105)}
	}), nil},
	{"pending grabs beyond the stock", healthy().with(func(s *state) {
		for i, u := range []int64{5, 6, 7} {
			oid := o(int64(110 + i))
			s.undelivered = append(s.undelivered, oid)
			s.answers.ByUser[u] = []int64{oid}
		}
	}), []string{check.NoOversell, check.Drained}},
	{"two order ids for one user", healthy().with(func(s *state) {
		s.answers.ByUser[1] = []int64{o(101), o(108)}
		s.failed = append(s.failed, [2]int64{o(108), 1})
		s.acked = append(s.acked, o(108))
	}), []string{check.OneOrderID}},
	{"one order id for two users", healthy().with(func(s *state) {
		s.answers.ByUser[5] = []int64{o(101)}
	}), []string{check.NoLostOrder, check.OneOrderID}},
}

func TestControls(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() { rdb.Close() })
	for _, engine := range engines {
		t.Run(engine.name, func(t *testing.T) {
			for _, c := range controls {
				t.Run(c.name, func(t *testing.T) {
					ctx := context.Background()
					db := seedDB(t, engine.url(t), c.state)
					prefix := seedRedis(t, rdb, c.state)
					rep, err := check.Run(ctx, check.Config{
						DB: db, Redis: rdb, Prefix: prefix, ActivityID: activityID, Answers: c.state.answers,
					})
					if err != nil {
						t.Fatal(err)
					}
					assertFailed(t, rep, c.failed)
				})
			}
		})
	}
}

// TestWithoutRedisAndAnswers: the database-only checks still run, the
// others say they were skipped, and a lost order is still found in the
// database when answers are given.
func TestWithoutRedisAndAnswers(t *testing.T) {
	ctx := context.Background()
	db := seedDB(t, sqliteURL(t), healthy())
	rep, err := check.Run(ctx, check.Config{DB: db, ActivityID: activityID})
	if err != nil {
		t.Fatal(err)
	}
	assertFailed(t, rep, nil)
	for _, name := range []string{check.NoLostOrder, check.Drained, check.NoPhantomOrder, check.OneOrderID} {
		if r, _ := rep.Result(name); !r.Skipped {
			t.Errorf("%s: got %+v, want skipped", name, r)
		}
	}
	if rep.RedisRemaining != nil || rep.Pending != nil {
		t.Errorf("redis figures without Redis: %v %v", rep.RedisRemaining, rep.Pending)
	}

	s := healthy().with(func(s *state) { s.answers.ByUser[5] = []int64{o(106)} })
	db = seedDB(t, sqliteURL(t), s)
	rep, err = check.Run(ctx, check.Config{DB: db, ActivityID: activityID, Answers: s.answers})
	if err != nil {
		t.Fatal(err)
	}
	assertFailed(t, rep, []string{check.NoLostOrder})
}

func TestMissingActivity(t *testing.T) {
	db := seedDB(t, sqliteURL(t), healthy())
	_, err := check.Run(context.Background(), check.Config{DB: db, ActivityID: activityID + 1})
	if err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("got %v, want activity not found", err)
	}
}

func TestReportOutput(t *testing.T) {
	s := healthy().with(func(s *state) { s.answers.ByUser[5] = []int64{o(106)} })
	db := seedDB(t, sqliteURL(t), s)
	rep, err := check.Run(context.Background(), check.Config{DB: db, ActivityID: activityID, Answers: s.answers})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{check.NoLostOrder, "FAILED", "skipped", fmt.Sprint("lost: ", o(106)), "VIOLATED"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if err := rep.Err(); err == nil || !strings.Contains(err.Error(), check.NoLostOrder) {
		t.Errorf("Err() = %v, want it to name %s", err, check.NoLostOrder)
	}
	js, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back check.Report
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	if back.OK() || len(back.Results) != len(rep.Results) || back.Stock != 5 {
		t.Errorf("JSON round trip lost data: %s", js)
	}
}

func TestWaitDrained(t *testing.T) {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() { rdb.Close() })

	// No stream at all: nothing was accepted, nothing to wait for.
	if err := check.WaitDrained(ctx, rdb, testenv.Prefix(t), activityID, time.Second); err != nil {
		t.Fatalf("no stream: %v", err)
	}

	s := healthy()
	s.delivered = []int64{o(106)}
	s.undelivered = []int64{o(107)}
	prefix := seedRedis(t, rdb, s)
	st, err := check.StreamStatus(ctx, rdb, prefix, activityID)
	if err != nil {
		t.Fatal(err)
	}
	if st.Drained() || st.Pending != 1 || !st.Undelivered || st.Length != 6 || !st.GroupExists {
		t.Fatalf("got %+v, want 6 entries, 1 pending, undelivered", st)
	}
	start := time.Now()
	err = check.WaitDrained(ctx, rdb, prefix, activityID, 300*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "1 pending") {
		t.Fatalf("got %v, want a timeout naming the pending entry", err)
	}
	if d := time.Since(start); d < 300*time.Millisecond || d > 2*time.Second {
		t.Errorf("gave up after %s, want about 300ms", d)
	}

	// A worker catches up while WaitDrained waits. WaitDrained may see
	// the acknowledgement before the worker's client has its reply: the
	// test waits for the worker before the client is closed.
	keys := stock.KeysFor(prefix, activityID)
	consumed := make(chan struct{})
	go func() {
		defer close(consumed)
		time.Sleep(200 * time.Millisecond)
		consume(context.Background(), t, rdb, keys.Orders, true)
	}()
	start = time.Now()
	err = check.WaitDrained(ctx, rdb, prefix, activityID, 5*time.Second)
	<-consumed
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Errorf("drained after %s, before the worker acknowledged", d)
	}
}

func TestOpen(t *testing.T) {
	for _, bad := range []string{"", "nonsense", "redis://127.0.0.1:6379/0", "sqlite://"} {
		if db, err := check.Open(context.Background(), bad); err == nil {
			db.Close()
			t.Errorf("Open(%q) succeeded", bad)
		}
	}
	_, err := check.Open(context.Background(), "postgres://u:secret@127.0.0.1:1/db?sslmode=disable&connect_timeout=1")
	if err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("got %v, want a connection error without the password", err)
	}
}

func assertFailed(t *testing.T, rep *check.Report, want []string) {
	t.Helper()
	var b strings.Builder
	_ = rep.WriteTable(&b)
	if len(rep.Results) != 8 {
		t.Fatalf("got %d results, want 8:\n%s", len(rep.Results), b.String())
	}
	for _, r := range rep.Results {
		wantFail := slices.Contains(want, r.Name)
		if r.Held == wantFail {
			t.Errorf("%s: held=%t, want %t", r.Name, r.Held, !wantFail)
		}
		if wantFail && r.Count <= 0 {
			t.Errorf("%s: count %d for a violation", r.Name, r.Count)
		}
	}
	if rep.OK() != (len(want) == 0) {
		t.Errorf("OK() = %t with failures %v", rep.OK(), want)
	}
	if t.Failed() {
		t.Logf("report:\n%s", b.String())
	}
}

var engines = []struct {
	name string
	url  func(testing.TB) string
}{
	{"postgres", testenv.PostgresURL},
	{"mysql", testenv.MySQLURL},
	{"sqlite", sqliteURL},
}

func sqliteURL(t testing.TB) string {
	return "sqlite://" + filepath.Join(t.TempDir(), "seckill.db")
}

// seedDB creates the three tables of the service's schema (without the
// unique index if the state asks so) in a fresh database and writes s.
func seedDB(t *testing.T, dbURL string, s state) *sql.DB {
	t.Helper()
	ctx := context.Background()
	db, err := check.Open(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	unique := ", UNIQUE (activity_id, user_id)"
	if s.noUniqueIndex {
		unique = ""
	}
	stmts := []string{
		`CREATE TABLE activities (id BIGINT PRIMARY KEY, name VARCHAR(200) NOT NULL,
			stock BIGINT NOT NULL, remaining BIGINT NOT NULL,
			starts_at TIMESTAMP NOT NULL, ends_at TIMESTAMP NOT NULL, rebuy BOOLEAN NOT NULL)`,
		`CREATE TABLE orders (id BIGINT PRIMARY KEY, activity_id BIGINT NOT NULL, user_id BIGINT NOT NULL,
			status VARCHAR(16) NOT NULL DEFAULT 'confirmed', paid_at TIMESTAMP NULL,
			created_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP` + unique + `)`,
		`CREATE TABLE order_returns (order_id BIGINT PRIMARY KEY, activity_id BIGINT NOT NULL,
			user_id BIGINT NOT NULL, status VARCHAR(16) NOT NULL, restocked_at TIMESTAMP NULL)`,
		`CREATE TABLE order_failures (order_id BIGINT PRIMARY KEY, activity_id BIGINT NOT NULL,
			user_id BIGINT NOT NULL, reason VARCHAR(32) NOT NULL, existing_order_id BIGINT NULL,
			created_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP)`,
		fmt.Sprintf(`INSERT INTO activities (id, name, stock, remaining, starts_at, ends_at, rebuy)
			VALUES (%d, 'control', %d, %d, '2026-01-01 00:00:00', '2036-01-01 00:00:00', %t)`,
			activityID, s.stock, s.remaining, !s.noRebuy),
	}
	for _, o := range s.confirmed {
		status := cmp.Or(s.status[o[0]], seckill.OrderConfirmed)
		paid := "NULL"
		if status == seckill.OrderPaid || o[0] == s.paidToo {
			paid = "CURRENT_TIMESTAMP"
		}
		stmts = append(stmts, fmt.Sprintf(`INSERT INTO orders (id, activity_id, user_id, status, paid_at) VALUES (%d, %d, %d, '%s', %s)`,
			o[0], activityID, o[1], status, paid))
	}
	for _, r := range s.returns {
		restocked := "NULL"
		if r[1] == 1 {
			restocked = "CURRENT_TIMESTAMP"
		}
		stmts = append(stmts, fmt.Sprintf(`INSERT INTO order_returns (order_id, activity_id, user_id, status, restocked_at)
			VALUES (%d, %d, 0, '%s', %s)`, r[0], activityID, cmp.Or(s.status[r[0]], seckill.OrderCancelled), restocked))
	}
	for _, o := range s.failed {
		stmts = append(stmts, fmt.Sprintf(`INSERT INTO order_failures (order_id, activity_id, user_id, reason)
			VALUES (%d, %d, %d, 'duplicate')`, o[0], activityID, o[1]))
	}
	// Another activity's orders must not count.
	stmts = append(stmts, fmt.Sprintf(`INSERT INTO orders (id, activity_id, user_id) VALUES (9001, %d, 1)`, activityID+1))
	for _, q := range stmts {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return db
}

// seedRedis writes the Redis side of s under a fresh prefix and returns it.
func seedRedis(t *testing.T, rdb *redis.Client, s state) string {
	t.Helper()
	ctx := context.Background()
	prefix := testenv.Prefix(t)
	keys := stock.KeysFor(prefix, activityID)
	t.Cleanup(func() { rdb.Del(context.Background(), keys.Meta, keys.Orders) })
	if !s.redisMissing {
		if err := rdb.HSet(ctx, keys.Meta, stock.MetaLeft, s.redisRemaining).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := rdb.XGroupCreateMkStream(ctx, keys.Orders, stock.Group, "0").Err(); err != nil {
		t.Fatal(err)
	}
	add := func(oids []int64) {
		for _, oid := range oids {
			err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: keys.Orders, Values: []any{"o", seckill.OrderLocal(oid), "u", 1, "t", 0}}).Err()
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	add(s.acked)
	consume(ctx, t, rdb, keys.Orders, true)
	add(s.delivered)
	consume(ctx, t, rdb, keys.Orders, false)
	add(s.undelivered)
	return prefix
}

// consume reads every new entry as a worker would, and acknowledges them
// (and every pending one) if ack is set.
func consume(ctx context.Context, t *testing.T, rdb *redis.Client, stream string, ack bool) {
	streams, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: stock.Group, Consumer: "c1", Streams: []string{stream, ">"}, Count: 1000, Block: -1,
	}).Result()
	if err != nil && err != redis.Nil {
		t.Error(err)
		return
	}
	if !ack {
		return
	}
	var ids []string
	for _, s := range streams {
		for _, m := range s.Messages {
			ids = append(ids, m.ID)
		}
	}
	pending, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: stock.Group, Start: "-", End: "+", Count: 1000}).Result()
	if err != nil {
		t.Error(err)
		return
	}
	for _, p := range pending {
		ids = append(ids, p.ID)
	}
	if len(ids) > 0 {
		if err := rdb.XAck(ctx, stream, stock.Group, ids...).Err(); err != nil {
			t.Error(err)
		}
	}
}
