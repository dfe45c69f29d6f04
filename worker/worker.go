// Package worker moves accepted grabs from the activities' Redis streams into
// the database: the peak-shaving half of a sale. It reads in batches through
// a consumer group, writes each batch in one transaction (Store.ApplyOrders),
// gives back stock for orders the database refused, and acknowledges only
// after all that. Entries left pending by a dead worker are claimed after an
// idle time; an entry delivered too often ends as a failed order.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/stock"
)

// Config tunes a Worker. Zero values take the defaults.
type Config struct {
	// Consumer names this worker in the consumer groups. Default
	// "<hostname>-<pid>-<random>". A worker restarted under the same name
	// resumes its own pending entries at once; under a new name they are
	// claimed after ClaimIdle.
	Consumer string
	// Batch is the most entries read and written at once. Default 200.
	Batch int
	// Block is how long a read waits for new entries. Default 1s.
	Block time.Duration
	// ClaimIdle is how long an entry stays pending with a silent consumer
	// before another worker claims it. Default 15s.
	ClaimIdle time.Duration
	// MaxDeliveries: an entry delivered more often ends as a failed order
	// (reason "poison"). Default 5.
	MaxDeliveries int64
	// Discover is how often the list of activities is refreshed. Default 2s.
	Discover time.Duration
	// Retention: activities that ended longer ago are no longer consumed.
	// Default 24h.
	Retention time.Duration
	// DrainTimeout bounds the work on a batch in hand after Run's ctx ends.
	// Default 30s.
	DrainTimeout time.Duration
	// TrimEvery is how often acknowledged entries are trimmed from the
	// streams. Default 10s; negative: never.
	TrimEvery time.Duration
}

func (c *Config) defaults() {
	if c.Consumer == "" {
		host, _ := os.Hostname()
		c.Consumer = fmt.Sprintf("%s-%d-%04x", host, os.Getpid(), rand.IntN(1<<16))
	}
	if c.Batch <= 0 {
		c.Batch = 200
	}
	if c.Block <= 0 {
		c.Block = time.Second
	}
	if c.ClaimIdle <= 0 {
		c.ClaimIdle = 15 * time.Second
	}
	if c.MaxDeliveries <= 0 {
		c.MaxDeliveries = 5
	}
	if c.Discover <= 0 {
		c.Discover = 2 * time.Second
	}
	if c.Retention <= 0 {
		c.Retention = 24 * time.Hour
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = 30 * time.Second
	}
	if c.TrimEvery == 0 {
		c.TrimEvery = 10 * time.Second
	}
}

// Worker consumes the order streams of all live activities.
type Worker struct {
	store   seckill.Store
	engine  *stock.Engine
	rdb     redis.UniversalClient
	cfg     Config
	log     *slog.Logger
	metrics *Metrics

	// crashAt, set by tests, is asked at each stage of a batch ("read":
	// before the database write, "committed": before compensation and ack);
	// true makes this consumer stop on the spot, as if killed.
	crashAt func(stage string) bool
}

// errCrashed is the simulated crash of a test.
var errCrashed = errors.New("worker: simulated crash")

// New returns a worker. metrics may be nil.
func New(store seckill.Store, engine *stock.Engine, cfg Config, log *slog.Logger, metrics *Metrics) *Worker {
	cfg.defaults()
	if metrics == nil {
		metrics = NewMetrics(nil)
	}
	return &Worker{store: store, engine: engine, rdb: engine.Client(), cfg: cfg,
		log: log.With("consumer", cfg.Consumer), metrics: metrics}
}

// Consumer returns the worker's consumer name.
func (w *Worker) Consumer() string { return w.cfg.Consumer }

// Run consumes until ctx ends, then finishes the batch in hand (commit,
// compensate, acknowledge) and returns nil.
func (w *Worker) Run(ctx context.Context) error {
	w.log.Info("worker started")
	var wg sync.WaitGroup
	var mu sync.Mutex
	running := map[int64]bool{}
	tick := time.NewTicker(w.cfg.Discover)
	defer tick.Stop()
	for {
		acts, err := w.store.Activities(ctx, time.Now().Add(-w.cfg.Retention))
		if err != nil && ctx.Err() == nil {
			w.log.Warn("list activities", "err", err)
		}
		for _, a := range acts {
			mu.Lock()
			busy := running[a.ID]
			running[a.ID] = true
			mu.Unlock()
			if busy {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				w.consume(ctx, a)
				mu.Lock()
				delete(running, a.ID)
				mu.Unlock()
			}()
		}
		select {
		case <-ctx.Done():
			wg.Wait()
			w.log.Info("worker stopped")
			return nil
		case <-tick.C:
		}
	}
}

// consume runs the loop of one activity's stream, until ctx ends or the
// activity ended longer than Retention ago and its stream is drained.
func (w *Worker) consume(ctx context.Context, a seckill.Activity) {
	activityID := a.ID
	k := w.engine.Keys(activityID)
	log := w.log.With("activity", activityID)
	// Own entries left pending by an earlier life of this consumer first.
	start := "0"
	nextClaim := time.Time{}
	nextTrim := time.Now().Add(w.cfg.TrimEvery)
	backoff := newBackoff()
	for ctx.Err() == nil {
		if time.Now().After(nextClaim) {
			err := w.claim(ctx, activityID, log)
			if err == errCrashed {
				return
			}
			if err != nil && ctx.Err() == nil {
				log.Warn("claim idle entries", "err", err)
			}
			nextClaim = time.Now().Add(w.cfg.ClaimIdle / 3)
		}
		if time.Since(a.EndsAt) > w.cfg.Retention {
			if st, err := w.engine.Stats(ctx, activityID); err == nil && st.Backlog() == 0 {
				log.Info("activity retired: ended and drained")
				return
			}
		}
		if w.cfg.TrimEvery > 0 && time.Now().After(nextTrim) {
			if n, err := w.engine.Trim(ctx, activityID); err != nil && ctx.Err() == nil {
				log.Warn("trim stream", "err", err)
			} else if n > 0 {
				log.Debug("trimmed stream", "entries", n)
			}
			nextTrim = time.Now().Add(w.cfg.TrimEvery)
		}
		streams, err := w.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: stock.Group, Consumer: w.cfg.Consumer, Streams: []string{k.Orders, start},
			Count: int64(w.cfg.Batch), Block: w.cfg.Block,
		}).Result()
		if errors.Is(err, redis.Nil) {
			backoff.reset()
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if !stock.IsNoGroup(err) {
				log.Warn("read stream", "err", err)
			}
			// NOGROUP: the activity is not (yet, or no longer) in Redis; the
			// API loads it, with its group, on the next grab.
			backoff.sleep(ctx)
			continue
		}
		backoff.reset()
		var msgs []redis.XMessage
		for _, s := range streams {
			msgs = append(msgs, s.Messages...)
		}
		if start == "0" && len(msgs) == 0 {
			start = ">" // own pending entries done
			continue
		}
		if w.process(ctx, activityID, msgs, nil, log) == errCrashed {
			return
		}
		if start == "0" {
			start = msgs[len(msgs)-1].ID
		}
	}
}

// claim takes over entries that another consumer left pending longer than
// ClaimIdle, and processes them.
func (w *Worker) claim(ctx context.Context, activityID int64, log *slog.Logger) error {
	k := w.engine.Keys(activityID)
	cursor := "0-0"
	for ctx.Err() == nil {
		msgs, next, err := w.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{
			Stream: k.Orders, Group: stock.Group, Consumer: w.cfg.Consumer,
			MinIdle: w.cfg.ClaimIdle, Start: cursor, Count: int64(w.cfg.Batch),
		}).Result()
		if err != nil {
			if stock.IsNoGroup(err) {
				return nil
			}
			return err
		}
		if len(msgs) > 0 {
			w.metrics.Claimed.Add(float64(len(msgs)))
			log.Info("claimed idle entries", "entries", len(msgs))
			counts, err := w.deliveries(ctx, k.Orders, msgs)
			if err != nil {
				return err
			}
			if w.process(ctx, activityID, msgs, counts, log) == errCrashed {
				return errCrashed
			}
		}
		if next == "0-0" || next == "" {
			return nil
		}
		cursor = next
	}
	return nil
}

// deliveries returns how often each message was delivered.
func (w *Worker) deliveries(ctx context.Context, stream string, msgs []redis.XMessage) (map[string]int64, error) {
	p, err := w.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: stream, Group: stock.Group, Start: msgs[0].ID, End: msgs[len(msgs)-1].ID,
		Count: int64(len(msgs)) * 2,
	}).Result()
	if err != nil {
		return nil, err
	}
	counts := make(map[string]int64, len(p))
	for _, e := range p {
		counts[e.ID] = e.RetryCount
	}
	return counts, nil
}

// process writes a batch to the database, compensates refused orders and
// acknowledges. It keeps trying while the database or Redis is unreachable;
// once ctx ends it still tries for DrainTimeout, then leaves the entries
// pending (another worker, or this one restarted, will claim them).
func (w *Worker) process(ctx context.Context, activityID int64, msgs []redis.XMessage, deliveries map[string]int64, log *slog.Logger) error {
	if len(msgs) == 0 {
		return nil
	}
	if w.crashAt != nil && w.crashAt("read") {
		return errCrashed
	}
	work, cancel := drainContext(ctx, w.cfg.DrainTimeout)
	defer cancel()
	began := time.Now()
	stopHeartbeat := w.heartbeat(work, activityID, msgs)
	defer stopHeartbeat()

	var apply, poison []seckill.OrderRequest
	var ids []string
	for _, m := range msgs {
		req, err := stock.ParseEntry(activityID, m)
		if err != nil {
			// Nothing can be done for an entry that names no order: drop it
			// loudly rather than block the stream behind it.
			log.Error("malformed stream entry dropped", "id", m.ID, "err", err)
			w.metrics.Malformed.Inc()
			ids = append(ids, m.ID)
			continue
		}
		ids = append(ids, m.ID)
		if deliveries[m.ID] > w.cfg.MaxDeliveries {
			poison = append(poison, req)
		} else {
			apply = append(apply, req)
		}
	}

	reqs := append(slices.Clone(apply), poison...)
	outcomes := make([]seckill.Outcome, 0, len(reqs))
	if len(apply) > 0 {
		out, err := w.applyOrIsolate(work, apply, log)
		if err != nil {
			log.Warn("batch left pending", "entries", len(msgs), "err", err)
			return err
		}
		outcomes = append(outcomes, out...)
	}
	if len(poison) > 0 {
		log.Error("entries delivered too often: failing their orders", "orders", len(poison))
		out, err := retry(work, func(ctx context.Context) ([]seckill.Outcome, error) {
			return w.store.FailOrders(ctx, poison, seckill.ReasonPoison)
		})
		if err != nil {
			log.Warn("batch left pending", "entries", len(msgs), "err", err)
			return err
		}
		outcomes = append(outcomes, out...)
	}

	if w.crashAt != nil && w.crashAt("committed") {
		return errCrashed
	}
	for i, o := range outcomes {
		r := reqs[i]
		if o.Status != seckill.OrderFailed {
			continue
		}
		_, err := retry(work, func(ctx context.Context) (bool, error) {
			return w.engine.Compensate(ctx, r.ActivityID, r.UserID, r.OrderID, o.ExistingOrderID)
		})
		if err != nil {
			log.Warn("compensation pending", "order", r.OrderID, "err", err)
			return err
		}
	}
	acked, err := retry(work, func(ctx context.Context) (int64, error) {
		return w.rdb.XAck(ctx, w.engine.Keys(activityID).Orders, stock.Group, ids...).Result()
	})
	if err != nil {
		log.Warn("ack failed; entries will be redelivered (harmless)", "err", err)
		return err
	}
	if acked < int64(len(ids)) {
		// Some entries were no longer pending: another worker finished them
		// (harmless), or Redis lost the stream, and perhaps rebuilt the
		// activity from a snapshot taken before this commit.
		w.reconcile(work, activityID, reqs, outcomes, log)
	}
	w.metrics.observe(outcomes, time.Since(began))
	return nil
}

// reconcile tells Redis about the batch's confirmed orders that it may not
// know (stock.Engine.Reconcile), waiting for the activity to be loaded
// again if Redis lost it.
func (w *Worker) reconcile(ctx context.Context, activityID int64, reqs []seckill.OrderRequest, outcomes []seckill.Outcome, log *slog.Logger) {
	var confirmed []seckill.Buyer
	for i, o := range outcomes {
		if o.Status == seckill.OrderConfirmed {
			confirmed = append(confirmed, seckill.Buyer{UserID: reqs[i].UserID, OrderID: reqs[i].OrderID})
		}
	}
	b := newBackoff()
	for ctx.Err() == nil {
		n, err := w.engine.Reconcile(ctx, activityID, confirmed)
		if err == nil {
			if n > 0 {
				log.Warn("redis had lost confirmed orders; reconciled", "units", n)
				w.metrics.Reconciled.Add(float64(n))
			}
			return
		}
		if !errors.Is(err, stock.ErrNotLoaded) {
			log.Warn("reconcile", "err", err)
		}
		b.sleep(ctx)
	}
	log.Error("reconcile gave up: the activity was not loaded in time", "orders", len(confirmed))
}

// heartbeat keeps the entries in hand from looking idle while process
// waits for the database: XCLAIM with JUSTID resets their idle time without
// counting a delivery, so no other worker claims them and a long database
// outage does not turn good orders into poison.
func (w *Worker) heartbeat(ctx context.Context, activityID int64, msgs []redis.XMessage) (stop func()) {
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(w.cfg.ClaimIdle / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				err := w.rdb.XClaimJustID(ctx, &redis.XClaimArgs{Stream: w.engine.Keys(activityID).Orders,
					Group: stock.Group, Consumer: w.cfg.Consumer, Messages: ids}).Err()
				if err != nil && ctx.Err() == nil {
					w.log.Warn("heartbeat on entries in hand", "err", err)
				}
			}
		}
	}()
	return func() { cancel(); <-done }
}

// applyOrIsolate applies the batch. If the database is up but keeps
// refusing the batch with an error, it applies the requests one by one so a
// single bad request cannot block the others; a request that fails alone
// ends as a poison failure.
func (w *Worker) applyOrIsolate(ctx context.Context, reqs []seckill.OrderRequest, log *slog.Logger) ([]seckill.Outcome, error) {
	out, err := retry(ctx, func(ctx context.Context) ([]seckill.Outcome, error) {
		return w.store.ApplyOrders(ctx, reqs)
	})
	if err == nil || ctx.Err() != nil {
		return out, err
	}
	if len(reqs) == 1 {
		log.Error("order refused by the database", "order", reqs[0].OrderID, "err", err)
		return retry(ctx, func(ctx context.Context) ([]seckill.Outcome, error) {
			return w.store.FailOrders(ctx, reqs, seckill.ReasonPoison)
		})
	}
	out = make([]seckill.Outcome, 0, len(reqs))
	for i := range reqs {
		o, err := w.applyOrIsolate(ctx, reqs[i:i+1], log)
		if err != nil {
			return nil, err
		}
		out = append(out, o...)
	}
	return out, nil
}

// retry calls f until it succeeds or ctx ends. After a few failures it
// checks whether the failure is the database's or Redis' being away (keep
// waiting) or f's own (give up after attempts, returning f's error).
func retry[T any](ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	const attempts = 3
	b := newBackoff()
	var zero T
	for i := 0; ; i++ {
		v, err := f(ctx)
		if err == nil {
			return v, nil
		}
		if ctx.Err() != nil {
			return zero, errors.Join(err, ctx.Err())
		}
		if i >= attempts && !transient(err) {
			return zero, err
		}
		b.sleep(ctx)
	}
}

// transient reports errors of the connection rather than of the request.
func transient(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	s := strings.ToLower(err.Error())
	for _, m := range []string{"connection refused", "connection reset", "broken pipe", "i/o timeout",
		"eof", "no such host", "server closed", "bad connection", "too many connections", "driver: bad",
		"shutting down", "loading", "closed pool", "network is unreachable", "timeout"} {
		if strings.Contains(s, m) {
			return true
		}
	}
	return false
}

// drainContext returns a context that stays alive for grace after parent
// ends, so a batch in hand can still be committed and acknowledged.
func drainContext(parent context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(parent))
	stop := context.AfterFunc(parent, func() {
		t := time.AfterFunc(grace, cancel)
		context.AfterFunc(ctx, func() { t.Stop() })
	})
	return ctx, func() { stop(); cancel() }
}

type backoff struct{ d time.Duration }

func newBackoff() *backoff { return &backoff{d: 50 * time.Millisecond} }
func (b *backoff) reset()  { b.d = 50 * time.Millisecond }

// sleep waits the current delay with jitter, doubling it up to 2s.
func (b *backoff) sleep(ctx context.Context) {
	d := b.d/2 + rand.N(b.d/2+1)
	b.d = min(2*b.d, 2*time.Second)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
