// Package lockprom exports a lock.Client's events as Prometheus metrics,
// through lock.Hooks, so that the lock package itself depends on no metrics
// library.
package lockprom

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckilldev/seckill/lock"
)

// Metrics are the lock metrics; register them with a Registerer and pass
// Hooks to lock.WithHooks.
type Metrics struct {
	attempts *prometheus.HistogramVec // acquire round trips by result
	waits    *prometheus.HistogramVec // TryLock/Lock calls by result
	renewals *prometheus.HistogramVec // watchdog renewals and Extends by result
	lost     prometheus.Counter
	held     *prometheus.HistogramVec // time held until Unlock, by result
}

// New returns the metrics, registered with reg if it is not nil. Lock names
// are not used as labels: they are unbounded (one per user, per order...).
func New(reg prometheus.Registerer) *Metrics {
	buckets := prometheus.ExponentialBuckets(0.0001, 2, 18) // 100µs to ~13s
	m := &Metrics{
		attempts: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "lock_acquire_attempt_seconds", Buckets: buckets,
			Help: "Latency of acquire round trips, by result: acquired, contended (held by another) or error.",
		}, []string{"result"}),
		waits: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "lock_wait_seconds", Buckets: buckets,
			Help: "Time spent in TryLock and Lock, by result: acquired, not_obtained (taken, or the wait ran out) or error.",
		}, []string{"result"}),
		renewals: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "lock_renewal_seconds", Buckets: buckets,
			Help: "Latency of watchdog renewals and Extends, by result: renewed, refused or error.",
		}, []string{"result"}),
		lost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lock_lost_total",
			Help: "Held locks found lost (renewal refused, key gone, or not renewed within the lease).",
		}),
		held: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "lock_held_seconds", Buckets: buckets,
			Help: "Time from acquisition to Unlock, by result: released, not_held or error.",
		}, []string{"result"}),
	}
	if reg != nil {
		reg.MustRegister(m.attempts, m.waits, m.renewals, m.lost, m.held)
	}
	return m
}

// Hooks returns the hooks that feed the metrics.
func (m *Metrics) Hooks() lock.Hooks {
	return lock.Hooks{
		Attempt: func(_ string, d time.Duration, err error) {
			m.attempts.WithLabelValues(result(err, "acquired", "contended")).Observe(d.Seconds())
		},
		Acquire: func(_ string, wait time.Duration, err error) {
			m.waits.WithLabelValues(result(err, "acquired", "not_obtained")).Observe(wait.Seconds())
		},
		Renew: func(_ string, d time.Duration, err error) {
			m.renewals.WithLabelValues(result(err, "renewed", "refused")).Observe(d.Seconds())
		},
		Lost: func(string, error) { m.lost.Inc() },
		Release: func(_ string, held time.Duration, err error) {
			m.held.WithLabelValues(result(err, "released", "not_held")).Observe(held.Seconds())
		},
	}
}

// result names an outcome: ok for nil, refused for the lock's "no" sentinels
// (ErrNotObtained, ErrNotHeld), error otherwise.
func result(err error, ok, refused string) string {
	switch {
	case err == nil:
		return ok
	case errors.Is(err, lock.ErrNotObtained), errors.Is(err, lock.ErrNotHeld):
		return refused
	}
	return "error"
}
