package lockprom_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/lock"
	"github.com/seckilldev/seckill/lock/goredis"
	"github.com/seckilldev/seckill/lock/lockprom"
)

func TestMetrics(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	defer rdb.Close()
	reg := prometheus.NewRegistry()
	m := lockprom.New(reg)
	prefix := testenv.Prefix(t) + ":"
	c := lock.New(goredis.New(rdb), lock.WithPrefix(prefix), lock.WithHooks(m.Hooks()))
	defer c.Close()
	ctx := context.Background()

	l, err := c.TryLock(ctx, "a", lock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryLock(ctx, "a", lock.WithTTL(time.Minute)); err == nil {
		t.Fatal("second TryLock got the lock")
	}
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// Lost: the key is deleted under a watchdog lock, which notices.
	w, err := c.TryLock(ctx, "b", lock.WithWatchdog(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.Del(ctx, prefix+"{b}").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("loss not noticed")
	}

	want := map[string]int{
		`lock_wait_seconds_count{result="acquired"}`:     2,
		`lock_wait_seconds_count{result="not_obtained"}`: 1,
		`lock_held_seconds_count{result="released"}`:     1,
		`lock_lost_total`: 1,
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			name := mf.GetName()
			if len(mt.GetLabel()) > 0 {
				name += `{result="` + mt.GetLabel()[0].GetValue() + `"}`
			}
			if h := mt.GetHistogram(); h != nil {
				got[name[:len(mf.GetName())]+"_count"+name[len(mf.GetName()):]] = int(h.GetSampleCount())
			}
			if c := mt.GetCounter(); c != nil {
				got[name] = int(c.GetValue())
			}
		}
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: got %d, want %d (all: %v)", k, got[k], v, got)
		}
	}
	if got[`lock_renewal_seconds_count{result="renewed"}`] == 0 {
		t.Errorf("no renewal observed: %v", got)
	}
}
