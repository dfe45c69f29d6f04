package stock

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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

	mu     sync.Mutex // guards the list, and one refresh of it at a time
	live   func(ctx context.Context) ([]int64, error)
	ids    []int64
	listed time.Time
}

// NewCollector returns a collector over the activities that live returns,
// read through o at most every old.
func NewCollector(o *Observer, live func(ctx context.Context) ([]int64, error), every time.Duration) *Collector {
	l := []string{"activity"}
	return &Collector{observer: o, live: live, every: every,
		lag:       prometheus.NewDesc("seckill_stream_backlog", "Accepted orders not yet delivered to a worker.", l, nil),
		pending:   prometheus.NewDesc("seckill_stream_pending", "Orders delivered to a worker and not yet acknowledged.", l, nil),
		remaining: prometheus.NewDesc("seckill_redis_remaining", "Stock left in Redis.", l, nil),
	}
}

func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.lag
	ch <- c.pending
	ch <- c.remaining
}

func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ids, err := c.list(ctx)
	if err != nil {
		return
	}
	seen, _ := c.observer.Observe(ctx, ids, c.every) // what failed is left out
	for _, id := range ids {
		obs, ok := seen[id]
		if !ok {
			continue
		}
		label := strconv.FormatInt(id, 10)
		ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, float64(obs.Stream.Lag), label)
		ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(obs.Stream.Pending), label)
		if obs.Loaded {
			ch <- prometheus.MustNewConstMetric(c.remaining, prometheus.GaugeValue, float64(obs.Remaining), label)
		}
	}
}

// list returns the live activities, listed at most every ago.
func (c *Collector) list(ctx context.Context) ([]int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.listed) < c.every {
		return c.ids, nil
	}
	ids, err := c.live(ctx)
	if err != nil {
		return nil, err
	}
	c.ids, c.listed = ids, time.Now()
	return ids, nil
}
