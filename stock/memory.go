package stock

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// MemoryCollector reports the memory Redis uses and its maxmemory limit,
// per node (every master of a Cluster), read at most every ago (see
// Observer.Memory). Redis must run with noeviction: at the limit it
// refuses the grab script's writes, and every grab fails, so an operator
// wants to know before (see the alerting rules in ops/). A server that
// does not report memory (the embedded one) yields no sample.
type MemoryCollector struct {
	observer *Observer
	every    time.Duration
	used     *prometheus.Desc
	max      *prometheus.Desc
}

// NewMemoryCollector returns a collector over the nodes of o's Redis.
func NewMemoryCollector(o *Observer, every time.Duration) *MemoryCollector {
	l := []string{"node"}
	return &MemoryCollector{observer: o, every: every,
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
	for _, n := range c.observer.Memory(ctx, c.every) {
		ch <- prometheus.MustNewConstMetric(c.used, prometheus.GaugeValue, n.Used, n.Addr)
		ch <- prometheus.MustNewConstMetric(c.max, prometheus.GaugeValue, n.Max, n.Addr)
	}
}

// readMemory reads INFO memory of every master of rdb.
func readMemory(ctx context.Context, rdb redis.UniversalClient) []NodeMemory {
	var mu sync.Mutex // ForEachMaster calls in parallel
	var nodes []NodeMemory
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
		mu.Lock()
		defer mu.Unlock()
		nodes = append(nodes, NodeMemory{Addr: node.Options().Addr, Used: used, Max: max})
		return nil
	}
	switch r := rdb.(type) {
	case *redis.ClusterClient:
		_ = r.ForEachMaster(ctx, report)
	case *redis.Client:
		_ = report(ctx, r)
	}
	return nodes
}
