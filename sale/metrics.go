package sale

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckilldev/seckill"
)

// Metrics are the service's Prometheus metrics.
type Metrics struct {
	Grabs *prometheus.CounterVec // by outcome: accepted, or an error code
	Loads prometheus.Counter
}

// NewMetrics creates the metrics and registers them with reg, if not nil.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Grabs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seckill_grabs_total",
			Help: "Grab requests by outcome: accepted (a new order), existing (the user's order again), or the error code answered.",
		}, []string{"outcome"}),
		Loads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seckill_activity_loads_total",
			Help: "Activities loaded (or rebuilt) into Redis from the database by this instance.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.Grabs, m.Loads)
	}
	return m
}

func (m *Metrics) grab(g Grabbed, err error) {
	switch {
	case err != nil:
		m.Grabs.WithLabelValues(seckill.ErrorCode(err)).Inc()
	case g.New:
		m.Grabs.WithLabelValues("accepted").Inc()
	default:
		m.Grabs.WithLabelValues("existing").Inc()
	}
}
