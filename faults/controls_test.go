package faults_test

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill/check"
	"github.com/seckilldev/seckill/faults/internal/cluster"
	"github.com/seckilldev/seckill/stock"
)

// TestCheckerControls: the checker, wired as the fault tests wire it
// (answers merged over several API instances, the sampler, Redis and the
// database read directly), must report a broken sale. A clean sale runs
// first; then its database, Redis or answers are broken one way at a time
// and the check named must fail, and the sale restored.
func TestCheckerControls(t *testing.T) {
	e := newEnv(t, envOptions{apis: 2, workers: 1, stock: 50})
	out := e.run(e.crowd(120, 200, 0), nil)
	requireHeld(t, out.report)
	if out.report.Confirmed != 50 {
		t.Fatalf("the clean sale sold %d of 50", out.report.Confirmed)
	}
	ctx := context.Background()
	db, rdb := e.chk.DB, e.chk.Redis
	keys := stock.KeysFor(e.prefix, e.activity)
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var oid, uid int64
	if err := db.QueryRowContext(ctx, `SELECT id, user_id FROM orders WHERE activity_id = $1 ORDER BY id LIMIT 1`, e.activity).Scan(&oid, &uid); err != nil {
		t.Fatal(err)
	}
	answers := out.crowd.Answers
	var extra string // the stream entry added by a control

	controls := []struct {
		name    string
		want    string
		answers *check.Answers
		break_  func()
		restore func()
	}{
		{"redis stock below zero", check.NoOversell, answers,
			func() { rdb.HSet(ctx, keys.Meta, stock.MetaLeft, -1) }, func() { rdb.HSet(ctx, keys.Meta, stock.MetaLeft, 0) }},
		{"an answered order vanished from the database", check.NoLostOrder, answers,
			func() { exec(`DELETE FROM orders WHERE id = $1`, oid) },
			func() {
				exec(`INSERT INTO orders (id, activity_id, user_id, holder_user_id) VALUES ($1, $2, $3, $3)`, oid, e.activity, uid)
			}},
		{"an order nobody was told about", check.NoPhantomOrder, answers,
			func() {
				exec(`INSERT INTO orders (id, activity_id, user_id, holder_user_id) VALUES (1, $1, 999999, 999999)`, e.activity)
			},
			func() { exec(`DELETE FROM orders WHERE id = 1`) }},
		{"a user with two orders", check.NoDuplicate, answers,
			func() {
				exec(`ALTER TABLE orders DROP CONSTRAINT orders_activity_holder_key`)
				exec(`INSERT INTO orders (id, activity_id, user_id, holder_user_id) VALUES (2, $1, $2, $2)`, e.activity, uid)
			},
			func() {
				exec(`DELETE FROM orders WHERE id = 2`)
				exec(`ALTER TABLE orders ADD CONSTRAINT orders_activity_holder_key UNIQUE (activity_id, holder_user_id)`)
			}},
		{"redis remaining plus confirmed above the stock", check.Conservation, answers,
			func() { rdb.HSet(ctx, keys.Meta, stock.MetaLeft, 1) }, func() { rdb.HSet(ctx, keys.Meta, stock.MetaLeft, 0) }},
		{"an order not yet written", check.Drained, answers,
			func() {
				extra = rdb.XAdd(ctx, &redis.XAddArgs{Stream: keys.Orders, Values: map[string]any{"o": "3", "u": "999998"}}).Val()
			},
			func() { rdb.XDel(ctx, keys.Orders, extra) }},
		{"a user told two order ids", check.OneOrderID, func() *check.Answers {
			a := &check.Answers{ByUser: maps.Clone(answers.ByUser), Uncertain: answers.Uncertain}
			a.ByUser[uid] = append(append([]int64(nil), a.ByUser[uid]...), oid+1)
			return a
		}(), func() {}, func() {}},
	}
	for _, c := range controls {
		c.break_()
		rep, err := e.chk.Check(ctx, e.activity, c.answers, nil)
		c.restore()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if r := result(t, rep, c.want); r.Held {
			var b strings.Builder
			_ = rep.WriteTable(&b)
			t.Errorf("control %q: %s held:\n%s", c.name, c.want, b.String())
		}
	}

	// The sampler must see a negative remaining while the sale runs.
	s := e.chk.Sample(e.activity, 5*time.Millisecond)
	rdb.HSet(ctx, keys.Meta, stock.MetaLeft, -3)
	cluster.Wait(ctx, 5*time.Second, func() bool { return !s.Result().Held })
	rdb.HSet(ctx, keys.Meta, stock.MetaLeft, 0)
	s.Stop()
	if r := s.Result(); r.Held {
		t.Errorf("control: the sampler missed a negative remaining: %s", r.Detail)
	}
}
