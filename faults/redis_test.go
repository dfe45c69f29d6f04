package faults_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/seckilldev/seckill/check"
	"github.com/seckilldev/seckill/faults/internal/cluster"
	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/stock"
)

// TestRedisKilledWithAOF: the Redis of the sale, with AOF fsynced every
// second, is killed with kill -9 in the middle of the sale and restarted
// from its AOF a second later. To give the crash something to lose, the
// workers are paused first (between batches), so that a backlog of
// accepted grabs waits in the stream, as it does at the peak of a real
// sale. A crash may lose the writes of the last second that were not yet
// fsynced: acknowledged grabs that only Redis knew of would be lost with
// them (a known, documented limit), so I3, and the second order id a user
// whose grab was lost may get, are measured, not required. Everything else
// must hold.
func TestRedisKilledWithAOF(t *testing.T) {
	rs := testenv.StartRedis(t, "--appendonly", "yes", "--appendfsync", "everysec")
	e := newEnv(t, envOptions{apis: 2, workers: 2, stock: 800, redis: rs})
	out := e.run(e.crowd(1500, 2200, 300), redisCrash(t, e, rs))
	reportRedisLoss(t, out)
}

// TestRedisRestartedWithoutPersistence: the same crash, on a Redis without
// any persistence, restarted empty. The service must notice the lost
// activity and rebuild it from the database (remaining stock, buyers of
// confirmed orders) before it accepts grabs again, meanwhile answering
// 503. The backlog of accepted grabs not yet in the database is lost with
// Redis (measured, not required); the database never sells more than the
// stock, and once rebuilt, Redis agrees with it (I5).
func TestRedisRestartedWithoutPersistence(t *testing.T) {
	rs := testenv.StartRedis(t)
	e := newEnv(t, envOptions{apis: 2, workers: 2, stock: 800, redis: rs})
	out := e.run(e.crowd(1500, 2200, 300), redisCrash(t, e, rs))
	reportRedisLoss(t, out)
}

// TestBucketsRedisRestartedWithoutPersistence: the same on a sale of 16
// buckets: the service rebuilds every bucket from the database, its buyers
// in their home buckets, and Redis agrees with the database again (I5).
func TestBucketsRedisRestartedWithoutPersistence(t *testing.T) {
	rs := testenv.StartRedis(t)
	e := newEnv(t, envOptions{apis: 2, workers: 2, stock: 800, redis: rs, buckets: 16})
	out := e.run(e.crowd(1500, 2200, 300), redisCrash(t, e, rs))
	reportRedisLoss(t, out)
}

// redisCrash stops the workers with SIGTERM once a quarter of the stock is
// sold (each finishes and acknowledges its batch, then exits), so that a
// backlog of accepted grabs builds up in Redis alone; kills Redis with
// kill -9 when the backlog is about a fifth of the stock; restarts it a
// second later while the crowd goes on; and restarts the workers.
func redisCrash(t *testing.T, e *env, rs *testenv.RedisServer) func(context.Context, *cluster.CrowdProgress) {
	return func(ctx context.Context, p *cluster.CrowdProgress) {
		if !waitAccepted(ctx, p, e.stock/4) {
			return
		}
		for _, w := range e.c.Workers() {
			if err := w.Proc().Term(30 * time.Second); err != nil {
				t.Errorf("%s: SIGTERM: %v", w.Name, err)
			}
		}
		e.fault("workers stopped", "with SIGTERM at %d accepted grabs: the stream holds the orders", p.Accepted())
		waitAccepted(ctx, p, e.stock/4+e.stock/5)
		st, err := e.chk.Backlog(ctx, e.activity)
		rs.Kill()
		e.fault("redis kill -9", "at %d accepted grabs; stream before the crash: %v (%v)", p.Accepted(), st, err)
		time.Sleep(time.Second)
		if err := rs.Start(); err != nil {
			t.Errorf("restart redis: %v", err)
			return
		}
		st, err = e.chk.Backlog(ctx, e.activity)
		e.logf("redis restarted; stream after the restart: %v (%v)", st, err)
		time.Sleep(500 * time.Millisecond)
		for _, w := range e.c.Workers() {
			if err := e.c.RestartWorker(w, w.Consumer()); err != nil {
				t.Error(err)
			}
		}
		e.logf("workers restarted")
		e.askAgain(ctx)
	}
}

// askAgain has a buyer whose order the database holds click again until
// Redis holds the activity again: the instance that finds it gone rebuilds
// it. A crowd that sold the stock out before the crash asks nothing of
// Redis after it (every instance answers from its sold-out snapshot, until
// it checks the snapshot again), and the rebuild would wait for the next
// grab; the click is that grab, and it takes no unit.
func (e *env) askAgain(ctx context.Context) {
	var uid int64
	q := fmt.Sprintf("SELECT user_id FROM orders WHERE activity_id = %d ORDER BY id LIMIT 1", e.activity)
	if err := e.chk.DB.QueryRowContext(ctx, q).Scan(&uid); err != nil {
		e.logf("ask again: no written order to ask about (%v)", err)
		return
	}
	url := fmt.Sprintf("%s/api/v1/activities/%d/grab", e.c.URLs()[0], e.activity)
	loaded := cluster.Wait(ctx, 20*time.Second, func() bool {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
		req.Header.Set("X-User-ID", strconv.FormatInt(uid, 10))
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
		st, err := e.chk.Backlog(ctx, e.activity)
		return err == nil && st.GroupExists
	})
	e.logf("user %d asked again after the restart: the activity is in redis again: %v", uid, loaded)
}

// reportRedisLoss requires every invariant but two, which it reports as
// figures: I3 (acknowledged grabs lost with Redis' memory) and "one order
// id per user" (a user whose grab was lost can grab again and be told
// another order id).
func reportRedisLoss(t *testing.T, out outcome) {
	t.Helper()
	requireHeld(t, out.report, check.NoLostOrder, check.OneOrderID)
	lost := result(t, out.report, check.NoLostOrder)
	t.Logf("LOST ACKNOWLEDGEMENTS: %d of %d grabs answered 202 (%s)", lost.Count, out.crowd.Counts.Accepted, lost.Detail)
	if c := result(t, out.report, check.OneOrderID); !c.Held {
		t.Logf("USERS TOLD A SECOND ORDER ID after their first was lost: %d (%s)", c.Count, c.Detail)
	}
}

// TestRedisRebuildMissesBatchInFlight shows a bug. A worker holds a batch
// in an open database transaction (stopped with SIGSTOP) when Redis, without
// persistence, is killed and restarted empty. The API rebuilds the
// activity from the database (sale.Service.load: remaining stock and the
// buyers of confirmed orders) while the batch is not yet committed; the
// worker, continued, commits it. Redis never learns of those units and
// buyers: its remaining stock stays above the database's for good (I5),
// it sells those units again (the database refuses them: orders answered
// 202 that end failed) and the batch's buyers can grab again. No oversell:
// the database's conditional update holds.
func TestRedisRebuildMissesBatchInFlight(t *testing.T) {
	rs := testenv.StartRedis(t)
	e := newEnv(t, envOptions{apis: 2, workers: 1, stock: 800, redis: rs})
	inFlight := int64(0)
	out := e.run(e.crowd(1500, 2200, 300), func(ctx context.Context, p *cluster.CrowdProgress) {
		if !waitAccepted(ctx, p, e.stock/4) {
			return
		}
		w := e.c.Workers()[0]
		caught, err := e.stopWhere(ctx, w, 50, 5*time.Second, func() bool {
			open, err := e.openTransactions(ctx)
			n, err2 := e.chk.PendingOf(ctx, e.activity, w.Consumer())
			if err == nil && err2 == nil && open > 0 && n > 0 {
				inFlight = n
				return true
			}
			return false
		})
		if err != nil || !caught {
			t.Errorf("never caught the worker inside its transaction with a batch in hand (%v)", err)
			return
		}
		e.fault("worker SIGSTOP", "inside its database transaction, %d orders in hand", inFlight)
		rs.Kill()
		e.fault("redis kill -9", "restarted empty at once")
		if err := rs.Start(); err != nil {
			t.Errorf("restart redis: %v", err)
			return
		}
		// Wait for the rebuild (the crowd's grabs trigger it), then let the
		// worker commit.
		meta := stock.KeysFor(e.prefix, e.activity).Meta
		if !cluster.Wait(ctx, time.Minute, func() bool { return e.chk.Redis.Exists(ctx, meta).Val() == 1 }) {
			t.Error("the activity was not rebuilt in Redis")
		}
		e.logf("activity rebuilt in Redis; continuing the worker")
		if err := w.Proc().Cont(); err != nil {
			t.Error(err)
		}
	})
	t.Logf("orders in the worker's transaction during the rebuild: %d", inFlight)
	requireHeld(t, out.report, check.NoLostOrder, check.OneOrderID)
}
