package main

import (
	"context"
	"log/slog"
	"net"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckilldev/seckill/dashboard"
	"github.com/seckilldev/seckill/httpapi"
	"github.com/seckilldev/seckill/queue"
	"github.com/seckilldev/seckill/sale"
	"github.com/seckilldev/seckill/stock"
)

// defaultCompareResults is where `bench --compare --results` and serve's
// dashboard meet unless told otherwise: beside serve's default database.
const defaultCompareResults = "seckill-compare.json"

// newDashboard builds serve's dashboard. It reads the grab counters and the
// API's latency histogram from a registry of their own: gathering serve's
// whole registry would also query Redis and the database for the stream
// gauges at every tick.
func newDashboard(c serveConfig, bk *backends, o *stock.Observer, m *sale.Metrics, api *httpapi.Server, room *queue.Room, log *slog.Logger) *dashboard.Dashboard {
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.Grabs, api.Latency())
	return dashboard.New(dashboard.Config{Store: bk.store, Engine: bk.engine, Observer: o, Metrics: reg, Room: room,
		IsAdmin: api.IsAdmin, Scrub: (secrets{}).add(c.backend.secrets()...).scrub,
		DBURL: c.backend.dbURL, CompareResults: c.compareResults, Log: log})
}

// runDashboard runs d's ticker among serve's background work. Its event
// streams end when ctx does, as the drain begins (an open stream would hold
// the drain to --drain-timeout), or with the background work on an early
// return.
func runDashboard(ctx, bgCtx context.Context, wg *sync.WaitGroup, d *dashboard.Dashboard) {
	dctx, stop := context.WithCancel(bgCtx)
	context.AfterFunc(ctx, stop)
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer stop()
		d.Run(dctx)
	}()
}

// dashboardURL is the dashboard's address for a person: a listener on every
// interface is reached on localhost.
func dashboardURL(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return "http://" + addr.String() + dashboard.Prefix
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, port) + dashboard.Prefix
}
