package sale

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seckilldev/seckill"
)

// newest answers "no such activity" for ids above every activity id the
// database holds without a query per request: a crowd of made-up ids costs
// one listing of the recent activities at a time, not one query each.
//
// The database issues activity ids in increasing order. An id above the
// newest one this instance knows of is either new or unknown; its request
// waits for a listing that begins after it arrived (so an activity created
// on another instance just before is seen), and every request waiting
// meanwhile shares that listing. After a listing that found nothing new,
// the next one waits listGap, which bounds the listings to a few per second
// under a flood. Ids at or below the newest that do not exist (gaps left by
// rolled-back inserts) are remembered one by one in Service.negative.
//
// The listing is of the activities not ended a day ago (Store.Activities):
// an activity created with its end already a day in the past, and newer
// than every other, is reported unknown.
type newest struct {
	id      atomic.Int64 // the newest activity id known to exist
	mu      sync.Mutex
	pending *listing // the next listing, which requests join; nil: none asked for
	running bool     // the listing loop runs
	useful  bool     // the last listing found a newer id
	last    time.Time
	listed  time.Time // when the last listing that succeeded began
}

// listing is one read of the newest id; done closes when it is known.
type listing struct {
	done chan struct{}
	id   int64
	err  error
}

const (
	listGap    = 20 * time.Millisecond
	listWindow = 24 * time.Hour
)

// saw records that activity id exists.
func (n *newest) saw(id int64) {
	for {
		cur := n.id.Load()
		if id <= cur || n.id.CompareAndSwap(cur, id) {
			return
		}
	}
}

// above reports whether id is above every activity id in the database, as
// a listing that began at since or later finds them: one that succeeded
// already, or the next one. list returns the newest id of the recent
// activities.
func (n *newest) above(ctx context.Context, id int64, since time.Time, list func(ctx context.Context) (int64, error)) (bool, error) {
	n.mu.Lock()
	if !n.listed.IsZero() && !n.listed.Before(since) {
		n.mu.Unlock()
		return id > n.id.Load(), nil
	}
	l := n.pending
	if l == nil {
		l = &listing{done: make(chan struct{})}
		n.pending = l
	}
	if !n.running {
		n.running = true
		go n.loop(list)
	}
	n.mu.Unlock()
	select {
	case <-l.done:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	if l.err != nil {
		return false, l.err
	}
	return id > l.id, nil
}

// loop runs the listings asked for, one at a time, and ends when none is.
func (n *newest) loop(list func(ctx context.Context) (int64, error)) {
	for {
		n.mu.Lock()
		l := n.pending
		if l == nil {
			n.running = false
			n.mu.Unlock()
			return
		}
		n.pending = nil // requests from now on join the next listing
		wait := time.Until(n.last.Add(listGap))
		if n.useful {
			wait = 0
		}
		n.mu.Unlock()
		if wait > 0 {
			time.Sleep(wait)
		}
		began := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		l.id, l.err = list(ctx)
		cancel()
		before := n.id.Load()
		if l.err == nil {
			n.saw(l.id)
			l.id = n.id.Load()
		}
		n.mu.Lock()
		n.last, n.useful = began, l.err == nil && l.id > before
		if l.err == nil {
			n.listed = began
		}
		n.mu.Unlock()
		close(l.done)
	}
}

// activityEntry is entry for a request that names an activity by id (a
// grab, a read): an id above every activity in the database is answered
// not found without a query of its own (see newest).
func (s *Service) activityEntry(ctx context.Context, id int64) (*entry, error) {
	return s.entrySince(ctx, id, time.Now())
}

// entrySince is activityEntry where a listing that began at since or later
// is recent enough to tell.
func (s *Service) entrySince(ctx context.Context, id int64, since time.Time) (*entry, error) {
	s.mu.RLock()
	e := s.entries[id]
	s.mu.RUnlock()
	if e != nil {
		return e, nil
	}
	if id > s.newest.id.Load() {
		above, err := s.newest.above(ctx, id, since, s.newestListed)
		switch {
		case err != nil && ctx.Err() != nil:
			return nil, seckill.Errorf(seckill.EUNAVAILABLE, "the request was cancelled")
		case err != nil:
			s.log.Error("list activities", "err", err)
			return nil, seckill.Errorf(seckill.EUNAVAILABLE, "the database cannot be reached right now")
		case above:
			return nil, seckill.Errorf(seckill.ENOTFOUND, "activity %d not found", id)
		}
	}
	return s.entry(ctx, id)
}

// newestListed returns the highest id among the activities not ended
// listWindow ago.
func (s *Service) newestListed(ctx context.Context) (int64, error) {
	acts, err := s.store.Activities(ctx, time.Now().Add(-listWindow))
	var id int64
	for _, a := range acts {
		id = max(id, a.ID)
	}
	return id, err
}
