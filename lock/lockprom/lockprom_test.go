package lockprom_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/rueidis"

	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/lock"
	"github.com/seckilldev/seckill/lock/lockprom"
	rueidislock "github.com/seckilldev/seckill/lock/rueidis"
)

func TestCollector(t *testing.T) {
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{testenv.RedisAddr(t)}})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	col := lockprom.New("test")
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(col)
	prefix := testenv.Prefix(t) + ":"
	c := lock.New(rueidislock.New(rc), lock.WithPrefix(prefix), lock.WithHooks(col.Hooks()))
	defer c.Close()
	ctx := context.Background()

	// a lease long enough that, on a loaded machine too, the lock is lost
	// by the refused renewal after the deletion, not by running out
	l, err := c.TryLock(ctx, "m", lock.WithWatchdog(1500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryLock(ctx, "m"); !errors.Is(err, lock.ErrNotObtained) {
		t.Fatal(err)
	}
	waitFor(t, reg, "test_lock_renewals_total{ok}")
	if err := rc.Do(ctx, rc.B().Del().Key(prefix+"{m}").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	<-l.Done() // lost
	l.Unlock(ctx)
	waitFor(t, reg, "test_lock_lost_total") // the hook runs right after the context ends

	got := gather(t, reg)
	for name, min := range map[string]float64{
		"test_lock_attempt_duration_seconds{acquired}":  1,
		"test_lock_attempt_duration_seconds{taken}":     1,
		"test_lock_wait_duration_seconds{acquired}":     1,
		"test_lock_wait_duration_seconds{not_obtained}": 1,
		"test_lock_renewals_total{ok}":                  1,
		"test_lock_renewals_total{refused}":             1,
		"test_lock_lost_total":                          1,
	} {
		if got[name] < min {
			t.Errorf("%s = %v, want at least %v (all: %v)", name, got[name], min, got)
		}
	}
}

// waitFor waits until the metric name has counted something.
func waitFor(t *testing.T, reg *prometheus.Registry, name string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); gather(t, reg)[name] < 1; {
		if time.Now().After(deadline) {
			t.Fatalf("%s still 0 after 10 s", name)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// gather returns the value of every counter and the sample count of every
// histogram, by name{result}.
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName() + labels(m)
			switch {
			case m.Counter != nil:
				got[name] = m.GetCounter().GetValue()
			case m.Histogram != nil:
				got[name] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return got
}

func labels(m *dto.Metric) string {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == "result" {
			return "{" + lp.GetValue() + "}"
		}
	}
	return ""
}
