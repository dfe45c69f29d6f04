package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/dashboard"
	"github.com/seckilldev/seckill/httpapi"
	"github.com/seckilldev/seckill/internal/lazyconn"
	"github.com/seckilldev/seckill/queue"
	"github.com/seckilldev/seckill/queue/page"
	"github.com/seckilldev/seckill/sale"
	"github.com/seckilldev/seckill/stock"
	"github.com/seckilldev/seckill/worker"
)

type serveConfig struct {
	listen     string
	adminToken string
	noWorker   bool
	debug      string
	metrics    string // --metrics-listen
	backend    backendFlags
	worker     workerFlags
	expiry     expiryFlags
	queue      queueFlags
	guard      guardFlags
	logs       logFlags
	// compareResults is the file of `bench --compare --results` that the
	// dashboard charts.
	compareResults string
	// drainTimeout bounds the HTTP drain on shutdown, and then the
	// worker's. Zero: defaultDrainTimeout.
	drainTimeout time.Duration
	// drainIdle is how long the drain waits for the next request of an
	// idle keep-alive connection before it closes it. Zero:
	// defaultDrainIdle.
	drainIdle time.Duration
	// ready, if set, receives the listening address once the API serves.
	ready func(addr string)
}

const (
	defaultDrainTimeout = 30 * time.Second
	defaultDrainIdle    = time.Second
)

func serveCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c serveConfig
	fs := newFlagSet("serve", stderr)
	fs.StringVar(&c.listen, "listen", "127.0.0.1:8080", "address the HTTP API listens on")
	fs.StringVar(&c.adminToken, "admin-token", "", "bearer token of the admin API, at least 16 bytes, better 32 (default: a random token, printed once)")
	fs.BoolVar(&c.noWorker, "no-worker", false, "run the API alone, without the order worker")
	fs.StringVar(&c.debug, "debug-listen", "", "address to serve Go's pprof profiles on (default: none)")
	fs.StringVar(&c.metrics, "metrics-listen", "", "address to serve /metrics on without a token (default: none; the API's /metrics takes the admin token)")
	fs.DurationVar(&c.drainTimeout, "drain-timeout", defaultDrainTimeout, "on SIGTERM, how long to answer the requests in flight, then as long for the worker to write the accepted orders; 0: no grace")
	fs.DurationVar(&c.drainIdle, "drain-idle", defaultDrainIdle, "on SIGTERM, how long an idle keep-alive connection may stay silent before it is closed; its next request until then is answered, with Connection: close")
	fs.StringVar(&c.compareResults, "compare-results", defaultCompareResults, "the `FILE` of seckill bench --compare --results FILE that the dashboard charts")
	c.backend.register(fs, "sqlite://seckill.db")
	c.backend.ack.register(fs)
	c.worker.register(fs)
	c.expiry.register(fs)
	c.queue.register(fs)
	c.guard.register(fs)
	c.logs.register(fs)
	if err := fs.parse(args); err != nil {
		return err
	}
	if err := c.backend.ack.check(); err != nil {
		return err
	}
	for _, d := range []struct {
		flag string
		v    *time.Duration
	}{{"--drain-timeout", &c.drainTimeout}, {"--drain-idle", &c.drainIdle}} {
		switch {
		case *d.v < 0:
			return usagef("%s: %v is negative", d.flag, *d.v)
		case *d.v == 0:
			*d.v = time.Nanosecond // no grace: in serveConfig, zero means the default
		}
	}
	return runServe(ctx, c, stdout, stderr)
}

// runServe checks every flag and URL of c, then starts: the JWK Set is read,
// the listeners open, then the embedded Redis, if any, and the backends.
// Its errors until it serves are startErrors.
func runServe(ctx context.Context, c serveConfig, stdout, stderr io.Writer) (err error) {
	serving := false
	defer func() {
		if !serving {
			err = notStarted(err)
		}
	}()
	if err := c.guard.check(); err != nil {
		return err
	}
	if err := c.backend.check(); err != nil {
		return err
	}
	log, err := c.logs.logger(stderr, append(c.backend.secrets(), c.guard.secrets(c.adminToken)...)...)
	if err != nil {
		return err
	}
	if err := checkAdminToken(c.adminToken, log); err != nil {
		return err
	}
	wcfg, err := c.worker.config()
	if err != nil {
		return err
	}
	ecfg, err := c.expiry.config(c.backend.prefix)
	if err != nil {
		return err
	}
	if err := c.queue.check(); err != nil {
		return err
	}
	if c.drainTimeout == 0 {
		c.drainTimeout = defaultDrainTimeout
	}
	if c.drainIdle == 0 {
		c.drainIdle = defaultDrainIdle
	}
	wcfg.DrainTimeout = c.drainTimeout
	generated := c.adminToken == ""
	if generated {
		b := make([]byte, goodAdminToken/2)
		_, _ = rand.Read(b)
		c.adminToken = hex.EncodeToString(b)
	}
	guardCtx, stopGuard := context.WithCancel(context.WithoutCancel(ctx))
	defer stopGuard()
	// The JWK Set, a file or a URL, is read before anything starts.
	verifier, err := c.guard.verifier(guardCtx, log)
	if err != nil {
		return err
	}
	tcp, err := net.Listen("tcp", c.listen)
	if err != nil {
		return usagef("--listen: %v", err)
	}
	// The server's timeouts, applied lazily: see package lazyconn.
	lazy := lazyconn.Listen(tcp, 0)
	defer lazy.Close()
	ln := &lingerListener{Listener: lazy, max: int64(c.guard.maxConns), refusal: httpapi.RawError(httpapi.TooManyConns()),
		bareLF: httpapi.RawError(httpapi.BareLF())}
	if c.debug != "" {
		stopDebug, err := serveDebug(c.debug)
		if err != nil {
			return err
		}
		defer stopDebug()
	}
	var metricsLn net.Listener
	if c.metrics != "" {
		if metricsLn, err = net.Listen("tcp", c.metrics); err != nil {
			return usagef("--metrics-listen: %v", err)
		}
		defer metricsLn.Close()
	}

	bk, err := c.backend.open(ctx, log)
	if err != nil {
		return stoppedEarly(ctx, log, err)
	}
	defer bk.close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// /metrics and the dashboard read Redis through one observer, at most
	// once a second (a dashboard's viewers once a tick) whoever asks; the
	// per-sale gauges are gathered at most once a second too.
	observer := stock.NewObserver(bk.engine)
	perSale := prometheus.NewRegistry()
	perSale.MustRegister(stock.NewCollector(observer, liveActivities(bk), time.Second))
	perSale.MustRegister(stock.NewMemoryCollector(observer, time.Second))
	metrics := &slowGatherer{live: reg, slow: perSale, every: time.Second}
	if metricsLn != nil {
		defer serveMetrics(metricsLn, metrics)()
	}

	locks := newLocks(bk.rdb, c.backend.prefix, reg)
	defer locks.Close()
	saleMetrics := sale.NewMetrics(reg)
	room, err := newRoom(&c.queue, bk, c.backend.prefix, log)
	if err != nil {
		return err
	}
	reg.MustRegister(queue.NewCollector(room))
	svc := sale.New(bk.store, bk.engine, sale.Config{Serialize: serializer(locks), Admission: room}, log, saleMetrics)
	if err := svc.WarmUp(ctx); err != nil {
		log.Warn("warm-up incomplete; activities load on first grab", "err", err)
	}
	apiOpts, blocklist := c.guard.apiOptions(guardCtx, bk, c.backend.prefix, log, verifier)
	apiOpts = append(apiOpts, httpapi.WithQueue(room))
	api := httpapi.New(svc, c.adminToken, health(bk, (secrets{}).add(c.backend.secrets()...)), log, reg, metrics, apiOpts...)
	dash := newDashboard(c, bk, observer, saleMetrics, api, room, log)
	api.Mount(dashboard.Prefix, dash)
	api.Mount(page.Prefix, page.Handler())
	var dr drainer
	srv := c.guard.server(api.ServeFast, api, &dr, log)

	// background work stops when bgCtx ends, after the HTTP server drained.
	bgCtx, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	// On an early return too, the background work ends before the
	// backends it uses are closed.
	defer func() { stopBG(); wg.Wait() }()
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = svc.Run(bgCtx)
	}()
	wg.Go(func() { _ = blocklist.Run(bgCtx) })
	if !c.noWorker {
		wEngine, err := bk.workerEngine(ctx, &c.backend)
		if err != nil {
			return err
		}
		w := worker.New(bk.store, wEngine, wcfg, log, worker.NewMetrics(reg))
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = w.Run(bgCtx)
		}()
	}
	runDashboard(ctx, bgCtx, &wg, dash)
	startRoom(bgCtx, &wg, room, bk, locks)
	if err := startExpiry(bgCtx, &wg, &c.expiry, ecfg, bk, locks, log, reg); err != nil {
		return err
	}

	serving = true
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	log.Info("serving", "addr", ln.Addr().String(), "worker", !c.noWorker, "expiry", !c.expiry.off, "ack_replicas", c.backend.ack.replicas)
	if generated {
		fmt.Fprintf(stdout, "admin token (generated; pass --admin-token to choose one): %s\n", c.adminToken)
	}
	fmt.Fprintf(stdout, "database: %s\n", describeDB(c.backend.dbURL))
	fmt.Fprintf(stdout, "listening on %s\n", ln.Addr())
	fmt.Fprintf(stdout, "dashboard: %s\n", dashboardURL(ln.Addr()))
	if c.ready != nil {
		c.ready(ln.Addr().String())
	}

	select {
	case err = <-serveErr:
	case <-ctx.Done():
		err = dr.drain(srv, ln, serveErr, c.drainTimeout, c.drainIdle, log)
	}
	// Every grab is answered: the worker now writes what the streams hold.
	stopBG()
	wg.Wait()
	log.Info("stopped")
	return err
}

// describeDB names the database for the startup lines: a SQLite file by its
// absolute path (a relative sqlite:// URL depends on the directory serve was
// started in), any other database by its URL without the password.
func describeDB(rawURL string) string {
	rest, ok := strings.CutPrefix(rawURL, "sqlite://")
	if !ok {
		return redactURL(rawURL)
	}
	rest, _, _ = strings.Cut(rest, "?")
	path, err := url.PathUnescape(rest)
	if err != nil {
		return redactURL(rawURL)
	}
	if path == ":memory:" {
		return "SQLite in memory (gone when serve stops)"
	}
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	return "SQLite file " + path
}

// liveActivities lists the activities that have not ended long ago.
func liveActivities(bk *backends) func(ctx context.Context) ([]seckill.Activity, error) {
	return func(ctx context.Context) ([]seckill.Activity, error) {
		return bk.store.Activities(ctx, time.Now().Add(-time.Hour))
	}
}

// health checks the backends; their errors, shown to the admin only, hide
// the secrets of the URLs too.
func health(bk *backends, hide secrets) map[string]httpapi.Health {
	return map[string]httpapi.Health{
		"redis":    func(ctx context.Context) error { return hide.err(bk.rdb.Ping(ctx).Err()) },
		"database": func(ctx context.Context) error { return hide.err(bk.store.Ping(ctx)) },
	}
}

// serveDebug serves net/http/pprof on its own listener, away from the API.
func serveDebug(addr string) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, usagef("--debug-listen: %v", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return func() { srv.Close() }, nil
}
