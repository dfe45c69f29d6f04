package main

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/seckilldev/seckill/worker"
)

type workerFlags struct {
	consumer  string
	batch     int
	linger    time.Duration
	claimIdle time.Duration
	retain    time.Duration
}

func (f *workerFlags) register(fs flagSet) {
	fs.StringVar(&f.consumer, "consumer", "", "this worker's name in the consumer group (default: host-pid-random); a worker restarted under its old name resumes its pending orders at once")
	fs.IntVar(&f.batch, "batch", 200, "orders written to the database in one transaction while they come a few at a time (a crowd's: see --linger)")
	fs.DurationVar(&f.linger, "linger", 50*time.Millisecond, "while a crowd's orders arrive and the worker keeps up, the least time between its reads of the order streams: what was accepted meanwhile goes to the database together, up to 4,000 orders a transaction (0: none; at most 1s)")
	fs.DurationVar(&f.claimIdle, "claim-idle", 15*time.Second, "how long a dead worker's orders wait before another worker claims them")
	fs.DurationVar(&f.retain, "redis-retention", 10*time.Minute, "how long an ended sale's keys stay in Redis; then, once all its orders are written, the worker deletes them and the database answers for it")
}

func (f *workerFlags) config() (worker.Config, error) {
	switch {
	case f.batch < 1 || f.batch > 10000:
		return worker.Config{}, usagef("--batch: %d is not between 1 and 10000", f.batch)
	case f.linger < 0 || f.linger > time.Second:
		return worker.Config{}, usagef("--linger: %v is not between 0 and 1s", f.linger)
	case f.claimIdle < 100*time.Millisecond:
		return worker.Config{}, usagef("--claim-idle: %v is shorter than 100ms", f.claimIdle)
	case f.retain < 0:
		return worker.Config{}, usagef("--redis-retention: %v is negative", f.retain)
	}
	linger := f.linger
	if linger == 0 {
		linger = -1 // none (zero is the default in worker.Config)
	}
	return worker.Config{Consumer: f.consumer, Batch: f.batch, Linger: linger, ClaimIdle: f.claimIdle,
		Retain: max(f.retain, time.Millisecond)}, nil
}

func workerCmd(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	running := false
	defer func() {
		if !running {
			err = notStarted(err)
		}
	}()
	var (
		backend backendFlags
		wf      workerFlags
		ef      expiryFlags
		logs    logFlags
		metrics string
		drain   time.Duration
	)
	fs := newFlagSet("worker", stderr)
	backend.register(fs, "sqlite://seckill.db")
	fs.Lookup("redis").Usage = "Redis URL of the API instances (required): redis://, rediss://, redis+cluster:// or redis+sentinel://, see Redis URLs below"
	wf.register(fs)
	ef.register(fs)
	logs.register(fs)
	fs.StringVar(&metrics, "metrics-listen", "", "address to serve /metrics on (default: none)")
	fs.DurationVar(&drain, "drain-timeout", 30*time.Second, "on SIGTERM, how long to go on writing the orders that the streams held then; 0: no grace")
	if err := fs.parse(args); err != nil {
		return err
	}
	log, err := logs.logger(stderr, backend.secrets()...)
	if err != nil {
		return err
	}
	cfg, err := wf.config()
	if err != nil {
		return err
	}
	ecfg, err := ef.config(backend.prefix)
	if err != nil {
		return err
	}
	if drain < 0 {
		return usagef("--drain-timeout: %v is negative", drain)
	}
	cfg.DrainTimeout = max(drain, time.Nanosecond) // 0: no grace (zero is the default in worker.Config)
	if backend.redisURL == "" {
		return usagef("--redis: the worker needs the Redis of the API instances")
	}
	if err := backend.check(); err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if metrics != "" {
		ln, err := net.Listen("tcp", metrics)
		if err != nil {
			return usagef("--metrics-listen: %v", err)
		}
		defer serveMetrics(ln, reg)()
	}
	bk, err := backend.open(ctx, log)
	if err != nil {
		return stoppedEarly(ctx, log, err)
	}
	defer bk.close()
	locks := newLocks(bk.rdb, backend.prefix, reg)
	defer locks.Close()
	// The expiry job ends before the backends it uses are closed.
	ectx, stopExpiry := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stopExpiry(); wg.Wait() }()
	if err := startExpiry(ectx, &wg, &ef, ecfg, bk, locks, log, reg); err != nil {
		return err
	}
	w := worker.New(bk.store, bk.engine, cfg, log, worker.NewMetrics(reg))
	running = true
	err = w.Run(ctx)
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}
