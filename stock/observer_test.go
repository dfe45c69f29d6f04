package stock_test

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/stock"
)

// TestObserverCost: a read of n activities costs at most 5 commands an
// activity in a few round trips; within the age asked, any number of
// views, one after another or at once, cost Redis nothing more; what is
// read is what Redis holds.
func TestObserverCost(t *testing.T) {
	for _, n := range []int{1, 500} {
		e, cmds := newEngineAt(t, testenv.RedisAddr(t), stock.Config{})
		ids := make([]int64, n)
		as := make([]seckill.Activity, n)
		for i := range ids {
			ids[i] = int64(i + 1)
			as[i] = openActivity(ids[i], 10)
			load(t, e, as[i], nil)
			grab(t, e, as[i], 7)
		}
		missing := int64(n + 1) // never loaded
		ask := append(as, seckill.Activity{ID: missing})
		ctx := context.Background()

		o := stock.NewObserver(e)
		before := cmds.N()
		seen, err := o.Observe(ctx, ask, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		read := cmds.N() - before
		t.Logf("%d activities (and one not loaded): %d commands a read", n, read)
		if read > 5*int64(n+1)+6 { // and a new connection's handshake
			t.Errorf("%d activities: %d commands, want at most 5 an activity", n, read)
		}
		for _, id := range ids {
			obs := seen[id]
			if !obs.Loaded || obs.Remaining != 9 || obs.Seq <= 0 || obs.Stream.Length != 1 || obs.Stream.Backlog() != 1 {
				t.Fatalf("activity %d: %+v, want 9 left, an order issued, 1 in the stream not delivered", id, obs)
			}
		}
		if obs, ok := seen[missing]; !ok || obs.Loaded || obs.Seq != 0 {
			t.Errorf("activity not loaded: %+v %v", obs, ok)
		}

		// 40 views at once, all within the age: nothing read.
		var wg sync.WaitGroup
		for range 40 {
			wg.Go(func() {
				if got, err := o.Observe(ctx, ask, time.Minute); err != nil || len(got) != len(ask) {
					t.Errorf("view: %d activities, %v", len(got), err)
				}
			})
		}
		wg.Wait()
		if extra := cmds.N() - before - read; extra != 0 {
			t.Errorf("40 views within the age cost %d more commands", extra)
		}

		// A fresh observer and 40 views at once: they share one read.
		o = stock.NewObserver(e)
		before = cmds.N()
		for range 40 {
			wg.Go(func() { _, _ = o.Observe(ctx, ask, time.Minute) })
		}
		wg.Wait()
		if got := cmds.N() - before; got > read || got < read-6 { // handshakes aside

			t.Errorf("40 views at once cost %d commands, want one read's %d", got, read)
		}

		// Past the age, the next view reads again and sees the change.
		first := seen[ids[0]].Seq
		grab(t, e, as[0], 8)
		seen, err = o.Observe(ctx, as[:1], 0)
		if err != nil || seen[ids[0]].Remaining != 8 || seen[ids[0]].Seq <= first {
			t.Errorf("after a second grab: %+v %v, want 8 left, a later order issued", seen[ids[0]], err)
		}
	}
}

// BenchmarkScrape500: a scrape of 500 live sales' gauges, the
// observations fresh (as within the second after a read): what a scraper
// costs the process once Redis is no longer asked.
func BenchmarkScrape500(b *testing.B) {
	e, _ := newEngineAt(b, testenv.RedisAddr(b), stock.Config{})
	as := make([]seckill.Activity, 500)
	for i := range as {
		as[i] = openActivity(int64(i+1), 10)
		if ok, err := e.Load(context.Background(), as[i], nil); err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
	o := stock.NewObserver(e)
	reg := prometheus.NewRegistry()
	reg.MustRegister(stock.NewCollector(o, func(context.Context) ([]seckill.Activity, error) { return as, nil }, time.Hour))
	b.Run("gather", func(b *testing.B) {
		for b.Loop() {
			if _, err := reg.Gather(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("gather+text", func(b *testing.B) {
		for b.Loop() {
			mfs, _ := reg.Gather()
			var buf bytes.Buffer
			for _, mf := range mfs {
				if _, err := expfmt.MetricFamilyToText(&buf, mf); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
