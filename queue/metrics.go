package queue

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector exports the rooms' state as this instance last read it (no
// Redis call at a scrape): per activity, the buyers who joined, those
// admitted (rate() of it is the admission rate), and whether admission is
// closed (sold out).
type Collector struct {
	room                     *Room
	joined, admitted, closed *prometheus.Desc
}

// NewCollector returns the collector of r's rooms.
func NewCollector(r *Room) *Collector {
	l := []string{"activity"}
	return &Collector{room: r,
		joined:   prometheus.NewDesc("seckill_queue_joined_total", "Buyers who joined the sale's waiting room.", l, nil),
		admitted: prometheus.NewDesc("seckill_queue_admitted_total", "Buyers the sale's waiting room admitted.", l, nil),
		closed:   prometheus.NewDesc("seckill_queue_closed", "1 while the waiting room admits no one (sold out).", l, nil),
	}
}

func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.joined
	ch <- c.admitted
	ch <- c.closed
}

func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for id, st := range c.room.States() {
		a := strconv.FormatInt(id, 10)
		closed := 0.0
		if st.Closed {
			closed = 1
		}
		ch <- prometheus.MustNewConstMetric(c.joined, prometheus.CounterValue, float64(st.Joined), a)
		ch <- prometheus.MustNewConstMetric(c.admitted, prometheus.CounterValue, float64(st.Admitted), a)
		ch <- prometheus.MustNewConstMetric(c.closed, prometheus.GaugeValue, closed, a)
	}
}
