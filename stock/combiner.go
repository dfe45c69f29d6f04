package stock

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// combiner batches the concurrent grabs of one activity: each of its
// goroutines takes whatever is queued (up to MaxBatch) and sends it as one
// script call. Nothing waits for a batch to fill, so a lone grab goes out at
// once and a crowd shares round trips. On a single Redis one combiner
// serves every bucket of an activity, its calls a group of grabs a bucket
// (grab.lua); on a Cluster, whose scripts run on one slot, each bucket has
// its own.
//
// Its goroutines end after CombinerIdle without a grab (see retire), so a
// shop's hundreds of past sales leave no goroutine behind; the next grab of
// the activity starts them again.
type combiner struct {
	e     *Engine
	id    int64
	b     int     // the bucket, or -1: every bucket
	s     *shards // the activity's buckets
	queue chan *grabReq

	// users counts the grabs that took this combiner (under e.mu) and have
	// not yet put their request in the queue, or given up.
	users atomic.Int64
	// running counts the goroutines; guarded by e.mu.
	running int
}

type grabReq struct {
	uid  int64
	b    int // the user's home bucket
	res  Result
	err  error
	done chan struct{}
}

var reqPool = sync.Pool{New: func() any { return &grabReq{done: make(chan struct{}, 1)} }}

// enqueue puts a grab in the queue; it gives up only if ctx ends first.
func (c *combiner) enqueue(ctx context.Context, uid int64, b int) (*grabReq, error) {
	r := reqPool.Get().(*grabReq)
	r.uid, r.b, r.res, r.err = uid, b, Result{}, nil
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
	call := c.e.newGrabCall(c.s)
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
		c.serve(batch, call)
		idle.Reset(c.e.cfg.CombinerIdle)
	}
}

// serve sends one batch in one script call, a group of grabs a bucket,
// and answers its grabs. In an activity of several buckets, grabs that
// found their bucket empty wait while the combiner borrows units for it
// from the other buckets, and go again; only when borrow proves the whole
// sale sold out are they told so. It sorts batch by bucket.
func (c *combiner) serve(batch []*grabReq, call *grabCall) {
	var groups [][]*grabReq
	var buckets, sizes []int
	for round := 0; ; round++ {
		slices.SortStableFunc(batch, func(x, y *grabReq) int { return cmp.Compare(x.b, y.b) })
		groups, buckets, sizes = groups[:0], buckets[:0], sizes[:0]
		for i := 0; i < len(batch); {
			j := i + 1
			for j < len(batch) && batch[j].b == batch[i].b {
				j++
			}
			groups, buckets, sizes = append(groups, batch[i:j]), append(buckets, batch[i].b), append(sizes, j-i)
			i = j
		}
		reply, unconfirmed, err := c.e.callGrab(context.Background(), call.build(groups, buckets))
		var res []Result
		var errs []error
		if err == nil {
			res, errs, err = decodeGroups(c.id, reply, sizes)
		}
		if err != nil {
			err = classify(err)
		} else if unconfirmed != nil {
			unconfirmed = ackedOutcome(unconfirmed)
		}
		var short []*grabReq // the grabs their bucket had no unit for, by bucket
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
		// Each bucket that ran short borrows; its grabs go again, or are
		// told why not.
		batch = short[:0]
		for i := 0; i < len(short); {
			j := i + 1
			for j < len(short) && short[j].b == short[i].b {
				j++
			}
			if err := c.e.borrow(context.Background(), c.s, short[i].b, j-i); err != nil {
				for _, r := range short[i:j] {
					r.res, r.err = Result{}, err
					r.done <- struct{}{}
				}
			} else {
				batch = append(batch, short[i:j]...)
			}
			i = j
		}
		if len(batch) == 0 {
			return
		}
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
