package stock

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// combiner batches the concurrent grabs of one activity: each of its
// goroutines takes whatever is queued (up to MaxBatch) and sends it as one
// script call. Nothing waits for a batch to fill, so a lone grab goes out at
// once and a crowd shares round trips.
//
// Its goroutines end after CombinerIdle without a grab (see retire), so a
// shop's hundreds of past sales leave no goroutine behind; the next grab of
// the activity starts them again.
type combiner struct {
	e     *Engine
	id    int64
	b     int     // the bucket
	s     *shards // the activity's buckets
	keys  Keys    // the bucket's
	queue chan *grabReq

	// users counts the grabs that took this combiner (under e.mu) and have
	// not yet put their request in the queue, or given up.
	users atomic.Int64
	// running counts the goroutines; guarded by e.mu.
	running int
}

type grabReq struct {
	uid  int64
	res  Result
	err  error
	done chan struct{}
}

var reqPool = sync.Pool{New: func() any { return &grabReq{done: make(chan struct{}, 1)} }}

// enqueue puts a grab in the queue; it gives up only if ctx ends first.
func (c *combiner) enqueue(ctx context.Context, uid int64) (*grabReq, error) {
	r := reqPool.Get().(*grabReq)
	r.uid, r.res, r.err = uid, Result{}, nil
	select {
	case c.queue <- r:
		return r, nil
	case <-ctx.Done():
		reqPool.Put(r)
		return nil, ctx.Err()
	}
}

// wait returns the answer to a queued grab. Once queued, a grab is answered
// whatever its caller's ctx does (the script call is bounded by the Redis
// client's timeouts), so that an accepted order is never hidden from the
// caller and r can go back to the pool.
func (r *grabReq) wait() (Result, error) {
	<-r.done
	res, err := r.res, r.err
	reqPool.Put(r)
	return res, err
}

func (c *combiner) run() {
	batch := make([]*grabReq, 0, c.e.cfg.MaxBatch)
	args := c.e.grabArgs(c.id, len(c.s.keys), c.b, c.keys)
	idle := time.NewTimer(c.e.cfg.CombinerIdle)
	defer idle.Stop()
	for {
		select {
		case r := <-c.queue:
			batch = append(batch[:0], r)
		case <-c.e.quit:
			c.drain()
			return
		case <-idle.C:
			if c.retire() {
				return
			}
			idle.Reset(c.e.cfg.CombinerIdle)
			continue
		}
	fill:
		for len(batch) < c.e.cfg.MaxBatch {
			select {
			case r := <-c.queue:
				batch = append(batch, r)
			default:
				break fill
			}
		}
		args = c.serve(batch, args)
		idle.Reset(c.e.cfg.CombinerIdle)
	}
}

// serve sends one batch, in one script call (args: grabArgs', reused), and
// answers its grabs. In an activity of several buckets, grabs that found
// their bucket empty wait while the combiner borrows units from the other
// buckets, and go again; only when borrow proves the whole sale sold out
// are they told so. It returns args for the next batch.
func (c *combiner) serve(batch []*grabReq, args []any) []any {
	var short []*grabReq // the grabs the bucket had no unit for
	for round := 0; ; round++ {
		args = args[:grabHead]
		for _, r := range batch {
			args = append(args, strconv.FormatInt(r.uid, 10))
		}
		reply, unconfirmed, err := c.e.callGrab(context.Background(), args)
		var res []Result
		var errs []error
		if err == nil {
			res, errs, err = decodeBatch(c.id, reply, len(batch))
		}
		if err != nil {
			err = classify(err)
		} else if unconfirmed != nil {
			unconfirmed = ackedOutcome(unconfirmed)
		}
		short = short[:0]
		for i, r := range batch {
			switch {
			case err != nil:
				r.err = err
			case unconfirmed != nil && errs[i] == nil:
				// The script gave this grab an order, new or held,
				// that the replicas have not confirmed.
				r.err = unconfirmed
			case errs[i] == ErrSoldOut && len(c.s.keys) > 1 && round < borrowRounds:
				short = append(short, r)
				continue
			case errs[i] == ErrSoldOut && len(c.s.keys) > 1:
				c.e.borrows.unproven.Add(1) // the rounds ran out
				r.res, r.err = res[i], errs[i]
			default:
				r.res, r.err = res[i], errs[i]
			}
			r.done <- struct{}{}
		}
		if len(short) == 0 {
			return args
		}
		if err := c.e.borrow(context.Background(), c.s, c.b, len(short)); err != nil {
			for _, r := range short {
				r.res, r.err = Result{}, err
				r.done <- struct{}{}
			}
			return args
		}
		// The answered grabs' requests are back in the pool: batch keeps
		// only the short ones, in a slice of its own.
		batch = append(make([]*grabReq, 0, len(short)), short...)
	}
}

// retire ends the calling goroutine if no grab can be waiting for it: none
// queued, and none between taking the combiner and queueing. Under e.mu no
// grab can take the combiner; a grab that took it before is counted in
// users until its request is in the queue, so users is read first and the
// queue second: users at 0 means every such request is queued (its send
// happened before its decrement) and len sees it. The last goroutine to
// end removes the combiner from the map, so the next grab starts a new one.
func (c *combiner) retire() bool {
	c.e.mu.Lock()
	defer c.e.mu.Unlock()
	if c.users.Load() != 0 || len(c.queue) != 0 {
		return false
	}
	c.running--
	if c.running == 0 {
		delete(c.e.combiners, shard{c.id, c.b})
	}
	return true
}

// drain fails the requests still queued at Close.
func (c *combiner) drain() {
	for {
		select {
		case r := <-c.queue:
			r.err = errClosed
			r.done <- struct{}{}
		default:
			return
		}
	}
}
