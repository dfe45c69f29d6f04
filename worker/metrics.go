package worker

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckilldev/seckill"
)

// Metrics are the worker's Prometheus metrics.
type Metrics struct {
	Orders        *prometheus.CounterVec // by status (confirmed, failed) and reason
	Compensations prometheus.Counter
	Claimed       prometheus.Counter
	Malformed     prometheus.Counter
	Reconciled    prometheus.Counter
	BatchSeconds  prometheus.Histogram
}

// NewMetrics creates the metrics and registers them with reg, if not nil.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Orders: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seckill_orders_written_total",
			Help: "Orders whose outcome the worker wrote to the database, by status and failure reason.",
		}, []string{"status", "reason"}),
		Compensations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seckill_compensations_total",
			Help: "Failed orders whose stock and buyer mark were handled in Redis.",
		}),
		Claimed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seckill_stream_claimed_total",
			Help: "Stream entries claimed from idle consumers.",
		}),
		Malformed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seckill_stream_malformed_total",
			Help: "Stream entries dropped because they name no order.",
		}),
		Reconciled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seckill_reconciled_units_total",
			Help: "Units of confirmed orders that Redis had lost and was told about again.",
		}),
		BatchSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "seckill_worker_batch_seconds",
			Help:    "Time to write, compensate and acknowledge one batch.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
	}
	if reg != nil {
		reg.MustRegister(m.Orders, m.Compensations, m.Claimed, m.Malformed, m.Reconciled, m.BatchSeconds)
	}
	return m
}

// observe counts a batch's outcomes: one update per label set, not one
// per order.
func (m *Metrics) observe(outcomes []seckill.Outcome, took time.Duration) {
	type labels struct {
		status seckill.OrderStatus
		reason string
	}
	counts := make(map[labels]int)
	for _, o := range outcomes {
		counts[labels{o.Status, o.Reason}]++
	}
	for l, n := range counts {
		m.Orders.WithLabelValues(string(l.status), l.reason).Add(float64(n))
		if l.status == seckill.OrderFailed {
			m.Compensations.Add(float64(n))
		}
	}
	m.BatchSeconds.Observe(took.Seconds())
}
