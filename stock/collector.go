package stock

import (
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// Collector reports the order streams of live activities at scrape time:
// entries not yet delivered to a worker (lag), delivered but not
// acknowledged (pending), and the stock left in Redis.
type Collector struct {
	engine    *Engine
	live      func(ctx context.Context) ([]int64, error)
	lag       *prometheus.Desc
	pending   *prometheus.Desc
	remaining *prometheus.Desc
}

// NewCollector returns a collector over the activities that live returns.
func NewCollector(e *Engine, live func(ctx context.Context) ([]int64, error)) *Collector {
	l := []string{"activity"}
	return &Collector{engine: e, live: live,
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
	ids, err := c.live(ctx)
	if err != nil {
		return
	}
	// A few pipelined round trips, however many sales are live.
	stats, err := c.engine.StatsOf(ctx, ids)
	if err != nil {
		return
	}
	pipe := c.engine.rdb.Pipeline()
	remaining := make([]*redis.StringCmd, len(ids))
	for i, id := range ids {
		remaining[i] = pipe.Get(ctx, c.engine.Keys(id).Stock)
	}
	_, _ = pipe.Exec(ctx)
	for i, id := range ids {
		label := strconv.FormatInt(id, 10)
		if st, ok := stats[id]; ok {
			ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, float64(st.Lag), label)
			ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(st.Pending), label)
		}
		if n, err := remaining[i].Int64(); err == nil {
			ch <- prometheus.MustNewConstMetric(c.remaining, prometheus.GaugeValue, float64(n), label)
		}
	}
}
