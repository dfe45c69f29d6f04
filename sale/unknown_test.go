package sale_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/sale"
)

// TestUnknownActivities: 20,000 grabs and reads of distinct activity ids
// that do not exist cost no database read by id and a few hundred
// listings at most (one shared by every request waiting), while an
// activity created on another instance during the flood is found on its
// first grab, every time.
func TestUnknownActivities(t *testing.T) {
	s := newSales(t)
	a := s.instance(t, sale.Config{})
	b := s.instance(t, sale.Config{})
	known := a.create(t, 100)
	ctx := context.Background()

	const requests, workers = 20_000, 256
	var next, wrong atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(rand.Uint64(), 1))
			for {
				i := next.Add(1)
				if i > requests {
					return
				}
				// Just above the newest, and anywhere up to MaxInt64.
				id := known.ID + 1_000_000 + i
				if i%2 == 0 {
					id = known.ID + 1_000_000 + rng.Int64N(1<<62)
				}
				var err error
				if i%3 == 0 {
					_, err = b.svc.Activity(ctx, id)
				} else {
					_, err = b.svc.Grab(ctx, id, 1)
				}
				if seckill.ErrorCode(err) != seckill.ENOTFOUND {
					wrong.Add(1)
					t.Errorf("activity %d: %v, want not found", id, err)
				}
			}
		})
	}
	// Meanwhile, new sales on instance a are grabbed on b at once.
	for i := range 20 {
		fresh := a.create(t, 10)
		if g, err := b.svc.Grab(ctx, fresh.ID, int64(i+1)); err != nil || !g.New {
			t.Errorf("grab on b of activity %d, just created on a: %+v, %v", fresh.ID, g, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	wg.Wait()
	byID, lists := b.store.activity.Load(), b.store.activities.Load()
	t.Logf("%d requests for unknown ids: %d reads by id, %d listings", requests, byID, lists)
	if byID > 20 { // the 20 new sales, each read once
		t.Errorf("%d reads of an activity by id, want at most 20 (the new sales)", byID)
	}
	if lists > requests/8 {
		t.Errorf("%d listings for %d requests, want far fewer", lists, requests)
	}
}
