package stock_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/stock"
)

// The memory gauges report what Redis says of itself, labelled with the
// node.
func TestMemoryCollector(t *testing.T) {
	srv := testenv.StartRedis(t, "--maxmemory", "64mb", "--maxmemory-policy", "noeviction")
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(stock.NewMemoryCollector(stock.NewObserver(stock.New(rdb, stock.Config{})), time.Second))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if l := m.GetLabel(); len(l) != 1 || l[0].GetName() != "node" || l[0].GetValue() != srv.Addr {
				t.Errorf("%s labels %v, want node=%s", mf.GetName(), l, srv.Addr)
			}
			got[mf.GetName()] = m.GetGauge().GetValue()
		}
	}
	if len(got) != 2 || got["seckill_redis_memory_max_bytes"] != 64<<20 {
		t.Fatalf("got %v, want maxmemory %d", got, 64<<20)
	}
	if used := got["seckill_redis_memory_used_bytes"]; used < 100_000 || used > 64<<20 {
		t.Errorf("used %v bytes: not a running Redis' figure", used)
	}
}
