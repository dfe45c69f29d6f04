package main

import (
	"cmp"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
)

// serveMetrics serves g's metrics at /metrics on ln, without a token: ln
// is an address for the operator's Prometheus (serve's and the worker's
// --metrics-listen). It returns the function that stops it.
func serveMetrics(ln net.Listener, g prometheus.Gatherer) (stop func()) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute}
	go func() { _ = srv.Serve(ln) }()
	return func() { srv.Close() }
}

// slowGatherer serves the families of live, gathered at each call, with
// those of slow, gathered at most every old: the per-sale gauges, whose
// values change once a second at most (stock.Observer) but whose gathering
// costs the process 12-18 µs a sale (6-9 ms a scrape with 500 live sales
// on a loaded machine: BenchmarkScrape500 in stock), which a scraper
// asking 40 times a second would pay 40 times. The two registries must not share a family.
type slowGatherer struct {
	live, slow prometheus.Gatherer
	every      time.Duration

	mu  sync.Mutex // one gathering of slow at a time
	at  time.Time
	mfs []*dto.MetricFamily
	err error
}

func (g *slowGatherer) Gather() ([]*dto.MetricFamily, error) {
	live, err := g.live.Gather()
	g.mu.Lock()
	if time.Since(g.at) >= g.every {
		g.mfs, g.err = g.slow.Gather()
		g.at = time.Now()
	}
	slow, slowErr := g.mfs, g.err
	g.mu.Unlock()
	// The families are shared between scrapes: read-only from here on.
	out := slices.Concat(live, slow)
	slices.SortFunc(out, func(a, b *dto.MetricFamily) int { return cmp.Compare(a.GetName(), b.GetName()) })
	if err == nil {
		err = slowErr
	}
	return out, err
}
