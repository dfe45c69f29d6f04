package stock

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckilldev/seckill"
)

// Collector reports the order streams of live activities: entries not yet
// delivered to a worker (lag), delivered but not acknowledged (pending),
// and the stock left in Redis. What it reports is at most every old (the
// list of live activities too), so that a scrape costs Redis and the
// database nothing more, however many scrapers there are (see Observer).
type Collector struct {
	observer  *Observer
	every     time.Duration
	lag       *prometheus.Desc
	pending   *prometheus.Desc
	remaining *prometheus.Desc
	// what this engine's borrowing between buckets did (BorrowStats)
	transfers, units, recovered, proven, unproven *prometheus.Desc

	mu     sync.Mutex // guards the list, and one refresh of it at a time
	live   func(ctx context.Context) ([]seckill.Activity, error)
	as     []seckill.Activity
	listed time.Time
}

// NewCollector returns a collector over the activities that live returns,
// read through o at most every old.
func NewCollector(o *Observer, live func(ctx context.Context) ([]seckill.Activity, error), every time.Duration) *Collector {
	l := []string{"activity"}
	return &Collector{observer: o, live: live, every: every,
		lag:       prometheus.NewDesc("seckill_stream_backlog", "Accepted orders not yet delivered to a worker.", l, nil),
		pending:   prometheus.NewDesc("seckill_stream_pending", "Orders delivered to a worker and not yet acknowledged.", l, nil),
		remaining: prometheus.NewDesc("seckill_redis_remaining", "Stock left in Redis.", l, nil),
		transfers: prometheus.NewDesc("seckill_bucket_transfers_total", "Transfers of units between the buckets of a sale, made by this instance.", nil, nil),
		units:     prometheus.NewDesc("seckill_bucket_units_moved_total", "Units those transfers moved.", nil, nil),
		recovered: prometheus.NewDesc("seckill_bucket_transfers_recovered_total", "Transfers left halfway (by a process that died or failed) that this instance completed.", nil, nil),
		proven:    prometheus.NewDesc("seckill_sold_out_proofs_total", "Sales of several buckets proved sold out by reading every bucket.", nil, nil),
		unproven:  prometheus.NewDesc("seckill_sold_out_unproven_total", "Grabs told sold out while units kept moving between buckets, without a proof that none was left (perhaps wrongly).", nil, nil),
	}
}

func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.lag
	ch <- c.pending
	ch <- c.remaining
	for _, d := range []*prometheus.Desc{c.transfers, c.units, c.recovered, c.proven, c.unproven} {
		ch <- d
	}
}

func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	b := c.observer.engine.BorrowStats()
	for d, v := range map[*prometheus.Desc]int64{c.transfers: b.Transfers, c.units: b.Units, c.recovered: b.Recovered,
		c.proven: b.Proven, c.unproven: b.Unproven} {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	as, err := c.list(ctx)
	if err != nil {
		return
	}
	seen, _ := c.observer.Observe(ctx, as, c.every) // what failed is left out
	for _, a := range as {
		obs, ok := seen[a.ID]
		if !ok {
			continue
		}
		label := strconv.FormatInt(a.ID, 10)
		ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, float64(obs.Stream.Lag), label)
		ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(obs.Stream.Pending), label)
		if obs.Loaded {
			ch <- prometheus.MustNewConstMetric(c.remaining, prometheus.GaugeValue, float64(obs.Remaining), label)
		}
	}
}

// list returns the live activities, listed at most every ago.
func (c *Collector) list(ctx context.Context) ([]seckill.Activity, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.listed) < c.every {
		return c.as, nil
	}
	as, err := c.live(ctx)
	if err != nil {
		return nil, err
	}
	c.as, c.listed = as, time.Now()
	return as, nil
}
