package lockprom_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/seckilldev/seckill/lock"
	"github.com/seckilldev/seckill/lock/lockprom"
)

// TestCollector feeds the hooks what the lock reports and reads the
// metrics back. That the lock calls the hooks is tested with the lock
// (lock/tests: TestHooks).
func TestCollector(t *testing.T) {
	col := lockprom.New("test")
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(col)
	h := col.Hooks()
	transport := errors.New("connection refused")
	lost := errors.Join(lock.ErrLost, errors.New("renewal refused"))

	h.Attempt("m", time.Millisecond, nil)
	h.Attempt("m", time.Millisecond, lock.ErrNotObtained)
	h.Attempt("m", time.Millisecond, transport)
	h.Acquire("m", time.Millisecond, nil)
	h.Acquire("m", time.Millisecond, errors.Join(lock.ErrNotObtained, context.DeadlineExceeded))
	h.Acquire("m", time.Millisecond, transport)
	h.Renew("m", time.Millisecond, nil)
	h.Renew("m", time.Millisecond, nil)
	h.Renew("m", time.Millisecond, lock.ErrNotHeld)
	h.Renew("m", time.Millisecond, transport)
	h.Lost("m", lost)
	h.Release("m", time.Second, nil)
	h.Release("m", time.Second, lock.ErrNotHeld) // not a hold that ended: not observed

	got := gather(t, reg)
	for name, want := range map[string]float64{
		"test_lock_attempt_duration_seconds{acquired}":  1,
		"test_lock_attempt_duration_seconds{taken}":     1,
		"test_lock_attempt_duration_seconds{error}":     1,
		"test_lock_wait_duration_seconds{acquired}":     1,
		"test_lock_wait_duration_seconds{not_obtained}": 1,
		"test_lock_wait_duration_seconds{error}":        1,
		"test_lock_renewals_total{ok}":                  2,
		"test_lock_renewals_total{refused}":             1,
		"test_lock_renewals_total{error}":               1,
		"test_lock_lost_total":                          1,
		"test_lock_held_duration_seconds":               1,
	} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v (all: %v)", name, got[name], want, got)
		}
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
