// Package expiry runs the job that expires unpaid orders: a confirmed order
// whose payment deadline has passed becomes expired and its unit goes back
// on sale, first in the database (Store.Expire, in the transaction that
// changes the order), then in Redis (stock.Engine.Return). The job also
// completes the Redis halves that a crash or an outage left undone, for
// expired and cancelled orders alike: the database keeps every return until
// it is recorded as restocked (Store.PendingReturns), and the Redis half is
// idempotent, so each unit comes back exactly once.
//
// Any number of processes run the job; one leads, elected with the lock
// library (a lease that a watchdog renews), and the others wait for the
// lock, so that a dead leader is replaced within one lease. A lease cannot
// stop a leader that was paused past it (GC, a stopped VM) from writing
// once it resumes, when another leads: so every expiry carries the lock's
// fencing token, and the database refuses a token below one it has seen
// (seckill.ErrFenced). The fence, not the lock, is what keeps two leaders
// from writing: the job does not even abort a write in flight when it
// learns that its lease ran out.
package expiry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/lock"
	"github.com/seckilldev/seckill/stock"
)

// Stock does the Redis half of a return: stock.Engine. Return is
// idempotent, and any result but an error means the half is done.
type Stock interface {
	Return(ctx context.Context, r seckill.Return) (stock.ReturnResult, error)
}

// Config tunes a Job. Zero values take the defaults.
type Config struct {
	// Name names the leader lock and its fence in the database (at most
	// 64 bytes). Processes that share a database and a Redis must use the
	// same name. Default "expiry".
	Name string
	// Lease is the leader's lease, renewed every third of it: a leader
	// that dies is replaced within about one lease. Default 15s.
	Lease time.Duration
	// Batch is the most orders expired in one transaction, and the most
	// pending returns read at once. Default 500, the most the stores take.
	Batch int
	// Interval is the longest sleep between rounds; a round also starts
	// at the earliest deadline. Default 1s.
	Interval time.Duration
	// RepairAfter is how old a pending return must be before the job does
	// its Redis half: a younger one is the business of the process that
	// made it (a cancel does the Redis half right after its transaction).
	// Default 5s.
	RepairAfter time.Duration
}

func (c *Config) defaults() {
	if c.Name == "" {
		c.Name = "expiry"
	}
	if c.Lease <= 0 {
		c.Lease = 15 * time.Second
	}
	if c.Batch <= 0 {
		c.Batch = 500
	}
	if c.Interval <= 0 {
		c.Interval = time.Second
	}
	if c.RepairAfter <= 0 {
		c.RepairAfter = 5 * time.Second
	}
}

// MaxName bounds Config.Name: the length of a fence's name in the database.
const MaxName = 64

// Job is one process's part in the expiry job.
type Job struct {
	store   seckill.Store
	stock   Stock
	locks   *lock.Client
	cfg     Config
	log     *slog.Logger
	metrics *Metrics
}

// New returns the job over the database, Redis (for the returned units)
// and the lock client that elects the leader. metrics may be nil.
func New(store seckill.Store, engine Stock, locks *lock.Client, cfg Config, log *slog.Logger, metrics *Metrics) (*Job, error) {
	cfg.defaults()
	if len(cfg.Name) > MaxName {
		return nil, fmt.Errorf("expiry: name %q is longer than %d bytes", cfg.Name, MaxName)
	}
	if metrics == nil {
		metrics = NewMetrics(nil)
	}
	return &Job{store: store, stock: engine, locks: locks, cfg: cfg,
		log: log.With("job", "expiry"), metrics: metrics}, nil
}

// minSleep keeps a round from following the last at once, should the
// database name a deadline that Expire does not take.
const minSleep = 10 * time.Millisecond

// Run campaigns for the lead and, while it leads, runs the rounds, until
// ctx ends; then it releases the lock, so that another process takes over
// at once, and returns nil.
func (j *Job) Run(ctx context.Context) error {
	j.log.Info("expiry job started", "lease", j.cfg.Lease)
	var backoff time.Duration
	for ctx.Err() == nil {
		l, err := j.locks.Lock(ctx, j.cfg.Name, lock.WithWatchdog(j.cfg.Lease))
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			backoff = min(max(2*backoff, 100*time.Millisecond), 5*time.Second)
			j.log.Warn("cannot campaign for the lead; trying again", "err", err, "in", backoff)
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			continue
		}
		backoff = 0
		j.metrics.Leader.Set(1)
		j.log.Info("leading", "token", l.Token())
		err = j.lead(ctx, l)
		j.metrics.Leader.Set(0)
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		_ = l.Unlock(uctx)
		cancel()
		switch {
		case errors.Is(err, seckill.ErrFenced):
			j.log.Warn("a newer leader has written: this one lost its lease; campaigning again", "token", l.Token())
		case err != nil:
			j.log.Warn("lost the lead; campaigning again", "token", l.Token(), "cause", err)
		}
	}
	j.log.Info("expiry job stopped")
	return nil
}

// lead runs rounds while the lock is held, until ctx ends (nil), the lock
// is known lost (its cause), or the database refused the token (ErrFenced).
//
// The loss of the lock is watched between rounds only: a round in flight
// goes on, and its writes are refused by the fence if another leader has
// written since (which is what a leader paused mid-round meets anyway).
func (j *Job) lead(ctx context.Context, l *lock.Lock) error {
	fence := seckill.Fence{Name: j.cfg.Name, Token: l.Token()}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-l.Done():
			return context.Cause(l.Context())
		case <-timer.C:
		}
		// A leader paused past its lease (a GC, a stopped VM) finds, once
		// it resumes, both its timer and the loss ready; the select above
		// may pick the timer, and the lease timer may not have fired yet.
		// The validity decides: no round starts under a lease that may
		// have run out. (A pause within a round is the fence's to catch:
		// its writes are refused once the next leader has written.)
		if !time.Now().Before(l.ValidUntil()) {
			if cause := context.Cause(l.Context()); cause != nil {
				return cause
			}
			return fmt.Errorf("%w: the lease ran out between two rounds", lock.ErrLost)
		}
		wait, err := j.round(ctx, fence)
		switch {
		case errors.Is(err, seckill.ErrFenced):
			j.metrics.Fenced.Inc()
			return err
		case err != nil:
			if ctx.Err() != nil {
				return nil
			}
			j.log.Warn("expiry round failed; trying again", "err", err, "in", j.cfg.Interval)
			wait = j.cfg.Interval
		default:
			j.metrics.LastRun.SetToCurrentTime()
		}
		timer.Reset(max(wait, minSleep))
	}
}

// round repairs the pending returns, expires every order that is due, and
// returns how long to sleep: until the earliest deadline, at most Interval.
func (j *Job) round(ctx context.Context, fence seckill.Fence) (time.Duration, error) {
	if err := j.repair(ctx); err != nil {
		if ctx.Err() != nil {
			return 0, err
		}
		// Expiry goes on: it is what buyers and the stock wait for.
		j.log.Warn("repair of pending returns failed; trying again next round", "err", err)
	}
	for {
		rets, err := j.store.Expire(ctx, fence, time.Now(), j.cfg.Batch)
		if err != nil {
			return 0, err
		}
		j.metrics.Expired.Add(float64(len(rets)))
		if len(rets) > 0 {
			j.log.Debug("expired", "orders", len(rets))
			if _, err := j.restock(ctx, rets); err != nil {
				j.log.Warn("give expired units back to redis; the repair will", "err", err)
			}
		}
		if len(rets) < j.cfg.Batch {
			break
		}
	}
	next, ok, err := j.store.NextDeadline(ctx)
	if err != nil {
		return 0, err
	}
	if !ok {
		return j.cfg.Interval, nil
	}
	return min(time.Until(next), j.cfg.Interval), nil
}

// repair does the Redis halves of the returns that the database holds as
// not restocked and that are older than RepairAfter, oldest first.
func (j *Job) repair(ctx context.Context) error {
	for {
		pending, err := j.store.PendingReturns(ctx, j.cfg.Batch)
		if err != nil {
			return err
		}
		due := pending
		cutoff := time.Now().Add(-j.cfg.RepairAfter)
		for i, r := range pending {
			if r.ReturnedAt.After(cutoff) {
				// Oldest first: the rest are younger still.
				due = pending[:i]
				break
			}
		}
		if len(due) == 0 {
			return nil
		}
		n, err := j.restock(ctx, due)
		j.metrics.Repaired.Add(float64(n))
		if n > 0 {
			j.log.Info("repaired returns whose redis half was left undone", "returns", n)
		}
		if err != nil {
			return err
		}
		if len(due) < len(pending) || len(pending) < j.cfg.Batch {
			return nil
		}
	}
}

// restock does the Redis halves of rets, in order, and records those done.
// It stops at the first error, which it returns with how many were done:
// the rest stay pending for the repair. (Redis unreachable fails every
// return, each after a timeout; the expiry must not wait for them all.)
func (j *Job) restock(ctx context.Context, rets []seckill.Return) (int, error) {
	done := make([]int64, 0, len(rets))
	var first error
	for _, r := range rets {
		if _, err := j.stock.Return(ctx, r); err != nil {
			first = fmt.Errorf("return order %d: %w", r.OrderID, err)
			break
		}
		done = append(done, r.OrderID)
	}
	if len(done) == 0 {
		return 0, first
	}
	if err := j.store.Restocked(ctx, done); err != nil {
		// The Redis halves are done; the next repair finds them done
		// (Return is idempotent) and records them.
		return 0, errors.Join(first, fmt.Errorf("record %d returns as restocked: %w", len(done), err))
	}
	return len(done), first
}
