package faults_test

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/seckilldev/seckill/faults/internal/cluster"
)

// stopWhere stops w with SIGSTOP while it holds entries and, 150ms later,
// asks where (whether it was caught in the state the test wants); if not,
// it continues w and tries again, up to tries times, each waiting up to
// inHandWait for w to hold entries. It reports whether w is left stopped
// where wanted.
func (e *env) stopWhere(ctx context.Context, w *cluster.Worker, tries int, inHandWait time.Duration, where func() bool) (bool, error) {
	for try := 0; try < tries && ctx.Err() == nil; try++ {
		if !e.inHand(ctx, w, inHandWait) {
			continue
		}
		if err := w.Proc().Stop(); err != nil {
			return false, err
		}
		time.Sleep(150 * time.Millisecond)
		if where() {
			return true, nil
		}
		if err := w.Proc().Cont(); err != nil {
			return false, err
		}
	}
	return false, nil
}

// inHand waits until the worker's consumer holds delivered, unacknowledged
// entries (a batch between read and acknowledgement), polling fast.
func (e *env) inHand(ctx context.Context, w *cluster.Worker, timeout time.Duration) bool {
	return cluster.Wait(ctx, timeout, func() bool {
		n, err := e.chk.PendingOf(ctx, e.activity, w.Consumer())
		return err == nil && n > 0
	})
}

// TestWorkerKilledMidBatch: a worker is killed with kill -9 while it holds
// a batch (entries read from the stream and not acknowledged), twice; it
// comes back once under a new consumer name (its batch must be claimed by
// another worker after --claim-idle) and once under its old name (it must
// resume its own pending entries). Nothing may be lost or doubled.
func TestWorkerKilledMidBatch(t *testing.T) { workerKilledMidBatch(t, 1) }

// TestBucketsWorkerKilledMidBatch: the same on a sale of 16 buckets, whose
// workers read 16 streams.
func TestBucketsWorkerKilledMidBatch(t *testing.T) { workerKilledMidBatch(t, 16) }

func workerKilledMidBatch(t *testing.T, buckets int) {
	e := newEnv(t, envOptions{apis: 2, workers: 2, stock: 800, buckets: buckets})
	var inHandAtDeath []int64
	out := e.run(e.crowd(1500, 2200, 300), func(ctx context.Context, p *cluster.CrowdProgress) {
		for k := 1; k <= 2; k++ {
			if !waitAccepted(ctx, p, int64(k)*e.stock/4) {
				return
			}
			w := e.c.Workers()[k%2]
			// Kill until one kill lands on a batch in hand (most land between
			// batches otherwise).
			for try := 0; try < 20 && ctx.Err() == nil; try++ {
				if !e.inHand(ctx, w, 5*time.Second) {
					continue
				}
				old := w.Consumer()
				w.Proc().Kill()
				n, err := e.chk.PendingOf(ctx, e.activity, old)
				if err != nil {
					t.Errorf("pending of %s: %v", old, err)
				}
				next := old
				if k == 1 {
					next = fmt.Sprintf("%s-%d", w.Name, try+1)
				}
				e.fault("worker kill -9", "%s (consumer %s) with %d entries in hand; restarted as %s", w.Name, old, n, next)
				if err := e.c.RestartWorker(w, next); err != nil {
					t.Errorf("restart %s: %v", w.Name, err)
					return
				}
				if n > 0 {
					inHandAtDeath = append(inHandAtDeath, n)
					break
				}
			}
		}
	})
	requireHeld(t, out.report)
	t.Logf("kills that found a batch in hand: %d (entries in hand: %v)", len(inHandAtDeath), inHandAtDeath)
	if len(inHandAtDeath) < 2 {
		t.Errorf("the fault was not injected: %d kills landed on a batch in hand, want 2", len(inHandAtDeath))
	}
}

// openTransactions counts the sessions of the test's database that have
// sat in an open transaction, doing nothing, for more than 100ms: a worker
// paused between BEGIN and COMMIT, holding the activity's row lock.
func (e *env) openTransactions(ctx context.Context) (int, error) {
	var n int
	err := e.chk.DB.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
AND state = 'idle in transaction' AND state_change < now() - interval '100 milliseconds'`).Scan(&n)
	return n, err
}

// TestWorkerFrozenInTransaction: a worker is stopped with SIGSTOP inside
// its database transaction after it wrote (orders inserted, which the
// other worker waits for once it claims the same entries, or the
// activity's row lock taken, which every batch waits for; the link to
// PostgreSQL is slowed by 20ms so that transactions last long enough to be
// caught), and stays stopped. The database must end the frozen session
// (the processes' URL sets idle_in_transaction_session_timeout to 2s; the
// default is 15s, see sqlstore.IdleTxTimeout) and the other worker must
// write every order of the sale, the frozen one's claimed entries
// included, while it is still stopped; continued, the frozen worker finds
// its transaction gone and carries on. Nothing may be lost or doubled.
func TestWorkerFrozenInTransaction(t *testing.T) {
	e := newEnv(t, envOptions{apis: 2, workers: 2, stock: 600,
		dbParams: url.Values{"idle_in_transaction_session_timeout": {"2s"}},
		procDB: func(direct string) string {
			p := startProxy(t, "db", direct)
			p.Slow(20 * time.Millisecond)
			return p.Addr()
		}})
	var writtenWhileStopped bool
	out := e.run(e.crowd(1200, 1800, 400), func(ctx context.Context, p *cluster.CrowdProgress) {
		if !waitAccepted(ctx, p, e.stock/4) {
			return
		}
		w := e.c.Workers()[0]
		caught, err := e.stopWhere(ctx, w, 40, 10*time.Second, func() bool {
			open, err := e.writingTransactions(ctx)
			return err == nil && open > 0
		})
		if err != nil || !caught {
			t.Errorf("never caught %s inside a transaction (%v)", w.Name, err)
			return
		}
		stoppedAt := time.Now()
		e.fault("worker SIGSTOP", "%s inside its database transaction, left stopped", w.Name)
		// Every order of the sale written while the frozen worker is still
		// stopped: the crowd has bought the whole stock and the stream is
		// drained.
		writtenWhileStopped = cluster.Wait(ctx, time.Minute, func() bool {
			b, err := e.chk.Backlog(ctx, e.activity)
			return p.Accepted() >= e.stock && err == nil && b.Drained()
		})
		open, err := e.writingTransactions(ctx)
		e.logf("after %s: every order written: %t; sessions idle in a transaction that wrote: %d (%v)",
			time.Since(stoppedAt).Round(time.Millisecond), writtenWhileStopped, open, err)
		if err := w.Proc().Cont(); err != nil {
			t.Error(err)
		}
	})
	requireHeld(t, out.report)
	if !writtenWhileStopped {
		t.Errorf("the orders were not all written within a minute while a worker was frozen inside its transaction: the frozen session kept its lock")
	}
}

// writingTransactions counts the sessions of the test's database idle for
// more than 100ms in a transaction that has written (it has a transaction
// id): a worker paused after inserting orders or taking the activity's
// row lock, which the same orders, or every batch, then wait for.
func (e *env) writingTransactions(ctx context.Context) (int, error) {
	var n int
	err := e.chk.DB.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
AND state = 'idle in transaction' AND backend_xid IS NOT NULL AND state_change < now() - interval '100 milliseconds'`).Scan(&n)
	return n, err
}

// TestWorkerPausedPastClaimIdle: a worker holding a batch is stopped with
// SIGSTOP past --claim-idle, then continued, twice. The first pause is
// placed outside the worker's database transaction (the workers reach
// Redis over a link slowed by 20ms, so a batch spends most of its time
// there): the other worker must claim the paused one's entries and write
// them, and the paused one, continued, finishes a batch already written.
// The second pause lands wherever it lands, often inside the transaction,
// where the other worker waits on the activity's row lock until the
// continue. Nothing may be lost or doubled.
func TestWorkerPausedPastClaimIdle(t *testing.T) {
	e := newEnv(t, envOptions{apis: 2, workers: 2, stock: 800, workerRedis: func(direct string) string {
		p := startProxy(t, "worker-redis", direct)
		p.Slow(20 * time.Millisecond)
		return p.Addr()
	}})
	claimIdle := e.c.Config().ClaimIdle
	var claims []bool
	out := e.run(e.crowd(1500, 2200, 300), func(ctx context.Context, p *cluster.CrowdProgress) {
		for k := 1; k <= 2; k++ {
			if !waitAccepted(ctx, p, int64(k)*e.stock/4) {
				return
			}
			w := e.c.Workers()[k%2]
			var n int64
			var stoppedAt time.Time
			for try := 0; try < 20 && ctx.Err() == nil; try++ {
				if !e.inHand(ctx, w, 10*time.Second) {
					continue
				}
				if err := w.Proc().Stop(); err != nil {
					t.Error(err)
					return
				}
				stoppedAt = time.Now()
				n, _ = e.chk.PendingOf(ctx, e.activity, w.Consumer())
				if k == 2 {
					break
				}
				time.Sleep(150 * time.Millisecond)
				open, err := e.openTransactions(ctx)
				if err == nil && open == 0 && n > 0 {
					break
				}
				// Paused inside a transaction: not the case wanted here.
				if err := w.Proc().Cont(); err != nil {
					t.Error(err)
					return
				}
				stoppedAt = time.Time{}
			}
			if stoppedAt.IsZero() {
				t.Errorf("pause %d: never caught %s with a batch in hand outside a transaction", k, w.Name)
				continue
			}
			e.fault("worker SIGSTOP", "%s with %d entries in hand, for %s or until they are claimed", w.Name, n, 3*claimIdle)
			claimed := func() bool {
				m, err := e.chk.PendingOf(ctx, e.activity, w.Consumer())
				return n > 0 && err == nil && m == 0
			}
			cluster.Wait(ctx, 3*claimIdle, func() bool { return false })
			ok := claimed()
			if k == 1 && !ok {
				ok = cluster.Wait(ctx, 10*time.Second, claimed)
			}
			if err := w.Proc().Cont(); err != nil {
				t.Error(err)
				return
			}
			e.logf("SIGCONT %s after %s; its entries were claimed by the other worker meanwhile: %t",
				w.Name, time.Since(stoppedAt).Round(time.Millisecond), ok)
			claims = append(claims, ok)
		}
	})
	requireHeld(t, out.report)
	if len(claims) < 2 {
		t.Errorf("the fault was not injected: %d pauses, want 2", len(claims))
	} else if !claims[0] {
		t.Errorf("the entries of a worker paused outside a transaction for longer than --claim-idle were not claimed")
	}
}
