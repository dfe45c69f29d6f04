package expiry

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the expiry job's Prometheus metrics.
type Metrics struct {
	Expired  prometheus.Counter
	Repaired prometheus.Counter
	Fenced   prometheus.Counter
	Leader   prometheus.Gauge
	LastRun  prometheus.Gauge
}

// NewMetrics creates the metrics and registers them with reg, if not nil.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Expired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seckill_expiry_expired_total",
			Help: "Unpaid orders this process expired past their payment deadline.",
		}),
		Repaired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seckill_expiry_returns_repaired_total",
			Help: "Returned units whose Redis half was left undone (a crash, Redis unreachable) and that this process completed.",
		}),
		Fenced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seckill_expiry_fenced_total",
			Help: "Expiry writes the database refused because a newer leader had written: this process had lost its lease.",
		}),
		Leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "seckill_expiry_leader",
			Help: "1 while this process leads the expiry job, else 0.",
		}),
		LastRun: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "seckill_expiry_last_run_timestamp_seconds",
			Help: "When this process last completed a round of the expiry job (Unix time).",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.Expired, m.Repaired, m.Fenced, m.Leader, m.LastRun)
	}
	return m
}
