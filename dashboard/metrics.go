package dashboard

import (
	"math"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// The metric families the dashboard reads, and the window its rates and
// latency percentiles are computed over.
const (
	grabsMetric   = "seckill_grabs_total"
	latencyMetric = "seckill_http_request_seconds"
	grabRoute     = "grab"
	window        = time.Second
)

// sample is one reading of the grab counters and of the grab route's
// latency histogram (all status classes summed).
type sample struct {
	at      time.Time
	grabs   Outcomes
	bounds  []float64 // bucket upper bounds, in seconds
	buckets []float64 // cumulative counts at bounds
	count   float64   // grabs observed, +Inf bucket included
}

// metrics fills the frame's outcome counts, rates and percentiles.
//
// Accepted, already and sold out come from the service's grab counter.
// Rejected and errors come from the HTTP histogram's status classes, so
// that they also count the grabs answered before the service saw them (bad
// input, a limit): rejected is every 4xx but sold_out, errors every 5xx.
func (s *sampler) metrics(f *Frame, now time.Time, fail func(string, error)) {
	if s.cfg.Metrics == nil {
		return
	}
	mfs, err := s.cfg.Metrics.Gather()
	if err != nil {
		fail("gather the metrics", err)
		return
	}
	cur := sample{at: now, grabs: Outcomes{}}
	for _, c := range classes {
		cur.grabs[c] = 0
	}
	var class4xx float64
	for _, mf := range mfs {
		switch mf.GetName() {
		case grabsMetric:
			for _, m := range mf.GetMetric() {
				switch label(m, "outcome") {
				case "accepted":
					cur.grabs[Accepted] += m.GetCounter().GetValue()
				case "existing":
					cur.grabs[Already] += m.GetCounter().GetValue()
				case "sold_out":
					cur.grabs[SoldOut] += m.GetCounter().GetValue()
				}
			}
		case latencyMetric:
			for _, m := range mf.GetMetric() {
				if label(m, "route") != grabRoute {
					continue
				}
				h := m.GetHistogram()
				switch label(m, "code") {
				case "4xx":
					class4xx += float64(h.GetSampleCount())
				case "5xx":
					cur.grabs[Errors] += float64(h.GetSampleCount())
				}
				cur.add(h)
			}
		}
	}
	// The counter moves inside the handler, the histogram after the
	// answer: a sold_out in flight is not yet among the 4xx.
	cur.grabs[Rejected] = max(0, class4xx-cur.grabs[SoldOut])
	f.Grabs = cur.grabs

	// The oldest sample within the window is the base of the rates.
	keep := s.samples[:0]
	for _, old := range s.samples {
		if now.Sub(old.at) <= window+s.cfg.Tick/2 {
			keep = append(keep, old)
		}
	}
	s.samples = append(keep, cur)
	base := s.samples[0]
	dt := now.Sub(base.at).Seconds()
	if dt <= 0 {
		return
	}
	f.Rates = make(map[string]float64, len(classes))
	for _, c := range classes {
		f.Rates[c] = max(0, cur.grabs[c]-base.grabs[c]) / dt
	}
	if cur.count > base.count && len(cur.bounds) == len(base.bounds) {
		f.P50MS = quantileMS(0.5, cur, base)
		f.P99MS = quantileMS(0.99, cur, base)
	}
}

// add sums a histogram of the same buckets into s.
func (s *sample) add(h *dto.Histogram) {
	bs := h.GetBucket()
	if s.bounds == nil {
		s.bounds = make([]float64, len(bs))
		s.buckets = make([]float64, len(bs))
		for i, b := range bs {
			s.bounds[i] = b.GetUpperBound()
		}
	}
	if len(bs) != len(s.bounds) {
		return
	}
	for i, b := range bs {
		s.buckets[i] += float64(b.GetCumulativeCount())
	}
	s.count += float64(h.GetSampleCount())
}

// quantileMS estimates the q-quantile, in milliseconds, of the grabs
// observed between base and cur, as Prometheus' histogram_quantile does:
// linear within the bucket that holds the rank; the highest finite bound
// for a rank in the +Inf bucket.
func quantileMS(q float64, cur, base sample) *float64 {
	total := cur.count - base.count
	rank := q * total
	lower, below := 0.0, 0.0
	for i, upper := range cur.bounds {
		n := cur.buckets[i] - base.buckets[i]
		if n >= rank {
			v := lower
			if n > below {
				v += (upper - lower) * (rank - below) / (n - below)
			}
			v = math.Round(v*1e6) / 1e3 // ms, to the µs
			return &v
		}
		lower, below = upper, n
	}
	v := lower * 1e3
	return &v
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
