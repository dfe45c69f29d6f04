// Package lockprom exports the lock's hooks as Prometheus metrics:
//
//	lock_attempt_duration_seconds{result}  one acquire round trip (acquired, taken, error)
//	lock_wait_duration_seconds{result}     time in TryLock/Lock (acquired, not_obtained, error)
//	lock_renewals_total{result}            watchdog renewals and Extend calls (ok, refused, error)
//	lock_lost_total                        held locks known lost
//	lock_held_duration_seconds             from acquisition to Unlock
//
// Mutexes, semaphore permits and read-write holds feed the same metrics.
//
// Contention is lock_attempt_duration_seconds_count{result="taken"}. Lock
// names are not labels: they are unbounded. Use one Collector per process,
// or wrap the registerer (prometheus.WrapRegistererWith) to tell clients
// apart.
package lockprom

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckilldev/seckill/lock"
)

// Collector gathers the metrics. It is a prometheus.Collector.
type Collector struct {
	attempt *prometheus.HistogramVec
	wait    *prometheus.HistogramVec
	renew   *prometheus.CounterVec
	lost    prometheus.Counter
	held    prometheus.Histogram
}

var _ prometheus.Collector = (*Collector)(nil)

// New returns a Collector whose metric names start with namespace ("" for
// none) followed by "lock_".
func New(namespace string) *Collector {
	return &Collector{
		attempt: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: "lock", Name: "attempt_duration_seconds",
			Help:    "Latency of one acquire round trip to Redis, by result (acquired, taken, error).",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16), // 50µs to 1.6s
		}, []string{"result"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: "lock", Name: "wait_duration_seconds",
			Help:    "Time spent in TryLock or Lock, by result (acquired, not_obtained, error).",
			Buckets: prometheus.ExponentialBuckets(100e-6, 2.5, 14), // 100µs to 15min
		}, []string{"result"}),
		renew: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "lock", Name: "renewals_total",
			Help: "Watchdog renewals and Extend calls, by result (ok, refused, error).",
		}, []string{"result"}),
		lost: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "lock", Name: "lost_total",
			Help: "Held locks known lost: renewal refused, lease ran out, or Redis unreachable past the lease.",
		}),
		held: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: "lock", Name: "held_duration_seconds",
			Help:    "Time from acquisition to Unlock.",
			Buckets: prometheus.ExponentialBuckets(100e-6, 2.5, 14),
		}),
	}
}

// Hooks returns the lock hooks that feed c: pass them to lock.WithHooks.
func (c *Collector) Hooks() lock.Hooks {
	return lock.Hooks{
		Attempt: func(_ string, d time.Duration, err error) {
			c.attempt.WithLabelValues(result(err, "acquired", "taken")).Observe(d.Seconds())
		},
		Acquire: func(_ string, wait time.Duration, err error) {
			c.wait.WithLabelValues(result(err, "acquired", "not_obtained")).Observe(wait.Seconds())
		},
		Renew: func(_ string, _ time.Duration, err error) {
			r := "ok"
			switch {
			case errors.Is(err, lock.ErrNotHeld):
				r = "refused"
			case err != nil:
				r = "error"
			}
			c.renew.WithLabelValues(r).Inc()
		},
		Lost: func(string, error) { c.lost.Inc() },
		Release: func(_ string, held time.Duration, err error) {
			if err == nil {
				c.held.Observe(held.Seconds())
			}
		},
	}
}

func result(err error, ok, notObtained string) string {
	switch {
	case err == nil:
		return ok
	case errors.Is(err, lock.ErrNotObtained):
		return notObtained
	}
	return "error"
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	c.attempt.Describe(ch)
	c.wait.Describe(ch)
	c.renew.Describe(ch)
	c.lost.Describe(ch)
	c.held.Describe(ch)
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.attempt.Collect(ch)
	c.wait.Collect(ch)
	c.renew.Collect(ch)
	c.lost.Collect(ch)
	c.held.Collect(ch)
}
