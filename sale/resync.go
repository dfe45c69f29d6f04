package sale

import (
	"context"
	"errors"
	"time"

	"github.com/seckilldev/seckill/stock"
)

// After Redis failed a grab (a master died, a failover may be under way),
// the activity is resynced once Redis has answered without failing for
// resyncQuiet: the database's confirmed orders are taught to Redis again
// (stock.Engine.Reconcile, which changes nothing Redis knows). A replica
// promoted without the last writes of its master lacks their units and
// buyers, even those acknowledged by another replica, while the worker
// wrote their orders to the database before the failover: without this,
// Redis would count more stock than the database (which refuses what
// that sells) and tell those buyers a second order id. The orders the
// worker still holds are reconciled by the worker itself, when their
// acknowledgement finds the new master without them.
//
// The failed grabs of a burst are logged once, when it starts, and
// counted when the resync runs, rather than one line each.
const resyncQuiet = time.Second

// redisFailed notes a grab that Redis failed (err), and starts the
// activity's resync unless one waits already.
func (s *Service) redisFailed(e *entry, err error) {
	e.mu.Lock()
	e.resyncAfter = time.Now().Add(resyncQuiet)
	e.failed++
	if e.resyncing {
		e.mu.Unlock()
		return
	}
	e.resyncing = true
	e.mu.Unlock()
	s.log.Warn("redis failed a grab; the activity is resynced from the database once redis answers again",
		"activity", e.a.ID, "err", err)
	go s.resync(e)
}

// resync waits until no grab failed for resyncQuiet, then reconciles,
// trying again while Redis or the database does not answer.
func (s *Service) resync(e *entry) {
	defer func() {
		e.mu.Lock()
		e.resyncing = false
		e.mu.Unlock()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for pause := 100 * time.Millisecond; ctx.Err() == nil && !s.engine.Closed(); pause = min(2*pause, 5*time.Second) {
		e.mu.RLock()
		wait := time.Until(e.resyncAfter)
		e.mu.RUnlock()
		if wait > 0 {
			sleepCtx(ctx, wait)
			continue
		}
		buyers, err := s.store.Buyers(ctx, e.a.ID)
		var n int64
		if err == nil {
			n, err = s.engine.Reconcile(ctx, e.a, buyers)
		}
		switch {
		case err == nil, errors.Is(err, stock.ErrNotLoaded): // not loaded: the rebuild reads the database anyway
			e.mu.Lock()
			failed := e.failed
			e.failed = 0
			e.mu.Unlock()
			if n > 0 {
				s.stats.Resynced.Add(float64(n))
				s.log.Warn("redis had lost confirmed orders; reconciled from the database", "activity", e.a.ID, "units", n, "failed_grabs", failed)
			} else {
				s.log.Info("redis answers again; it held every confirmed order", "activity", e.a.ID, "failed_grabs", failed)
			}
			return
		}
		sleepCtx(ctx, pause)
	}
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
