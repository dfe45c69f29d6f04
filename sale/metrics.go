package sale

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckilldev/seckill"
)

// Metrics are the service's Prometheus metrics.
type Metrics struct {
	Grabs     *prometheus.CounterVec // by outcome: accepted, or an error code
	Loads     prometheus.Counter
	Snapshots prometheus.Counter // buyer snapshots of sold-out activities taken
	Resynced  prometheus.Counter // units of confirmed orders taught to Redis again after a failure (resync.go)

	// outcomes holds the counters of the usual outcomes, resolved once:
	// a grab should not pay for hashing label values.
	outcomes map[string]prometheus.Counter
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
		Snapshots: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seckill_buyer_snapshots_total",
			Help: "Buyer snapshots of sold-out activities taken by this instance (each answers the clicks after the sell-out from memory).",
		}),
		Resynced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seckill_resynced_units_total",
			Help: "Units of confirmed orders that Redis had lost (a replica promoted without its master's last writes) and this instance taught it again from the database.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.Grabs, m.Loads, m.Snapshots, m.Resynced)
	}
	m.outcomes = map[string]prometheus.Counter{}
	for _, o := range []string{"accepted", "existing", seckill.ESOLDOUT, seckill.ENOTSTARTED, seckill.EENDED,
		seckill.ENOTFOUND, seckill.EINVALID, seckill.EUNAVAILABLE, seckill.EOUTCOMEUNKNOWN} {
		m.outcomes[o] = m.Grabs.WithLabelValues(o)
	}
	return m
}

func (m *Metrics) grab(g Grabbed, err error) {
	outcome := "existing"
	switch {
	case err != nil:
		outcome = seckill.ErrorCode(err)
	case g.New:
		outcome = "accepted"
	}
	c := m.outcomes[outcome]
	if c == nil {
		c = m.Grabs.WithLabelValues(outcome)
	}
	c.Inc()
}
