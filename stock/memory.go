package stock

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// MemoryCollector reports, at scrape time, the memory Redis uses and its
// maxmemory limit, per node (every master of a Cluster). Redis must run
// with noeviction: at the limit it refuses the grab script's writes, and
// every grab fails, so an operator wants to know before (see the alerting
// rules in ops/). A server that does not report memory (the embedded one)
// yields no sample.
type MemoryCollector struct {
	rdb  redis.UniversalClient
	used *prometheus.Desc
	max  *prometheus.Desc
}

// NewMemoryCollector returns a collector over rdb's nodes.
func NewMemoryCollector(rdb redis.UniversalClient) *MemoryCollector {
	l := []string{"node"}
	return &MemoryCollector{rdb: rdb,
		used: prometheus.NewDesc("seckill_redis_memory_used_bytes", "Memory Redis uses (INFO memory used_memory).", l, nil),
		max:  prometheus.NewDesc("seckill_redis_memory_max_bytes", "Redis' maxmemory limit; 0: none.", l, nil),
	}
}

func (c *MemoryCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.used
	ch <- c.max
}

func (c *MemoryCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var mu sync.Mutex // ForEachMaster calls in parallel
	report := func(ctx context.Context, node *redis.Client) error {
		info, err := node.InfoMap(ctx, "memory").Result()
		if err != nil {
			return nil // this node says nothing; the others may
		}
		used, err1 := strconv.ParseFloat(info["Memory"]["used_memory"], 64)
		max, err2 := strconv.ParseFloat(info["Memory"]["maxmemory"], 64)
		if err1 != nil || err2 != nil {
			return nil
		}
		addr := node.Options().Addr
		mu.Lock()
		defer mu.Unlock()
		ch <- prometheus.MustNewConstMetric(c.used, prometheus.GaugeValue, used, addr)
		ch <- prometheus.MustNewConstMetric(c.max, prometheus.GaugeValue, max, addr)
		return nil
	}
	switch r := c.rdb.(type) {
	case *redis.ClusterClient:
		_ = r.ForEachMaster(ctx, report)
	case *redis.Client:
		_ = report(ctx, r)
	}
}
