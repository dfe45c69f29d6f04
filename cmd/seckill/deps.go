package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/stock"
	"github.com/seckilldev/seckill/store"
)

// backends are the outside systems of one process: Redis and the database,
// either real servers or the embedded defaults (miniredis, which runs the
// same Lua scripts, and a SQLite file).
type backends struct {
	rdb     redis.UniversalClient
	store   seckill.Store
	engine  *stock.Engine
	closers []func() error
}

type backendFlags struct {
	redisURL string
	dbURL    string
	prefix   string
	ack      ackFlags // registered by serve only
}

func (b *backendFlags) register(fs flagSet, defaultDB string) {
	fs.StringVar(&b.redisURL, "redis", "", "Redis URL: redis://, rediss://, redis+cluster:// or redis+sentinel://, see Redis URLs below (default: an embedded Redis in this process)")
	fs.StringVar(&b.dbURL, "db", defaultDB, "database URL: postgres://, mysql:// or sqlite://, see Database URLs below")
	fs.StringVar(&b.prefix, "redis-prefix", stock.DefaultPrefix, "namespace of every Redis key")
}

// redisLogger sends go-redis' own messages (pool dial failures and the
// like) to the process log at debug level: the errors that matter reach
// the caller anyway. go-redis has one logger per process, read from any
// goroutine: run sets it once (quietRedis), before any command, so that
// none prints go-redis' lines on stderr (its default logger did, for each
// attempt at a Redis that does not answer, before the command printed the
// same dial error as its own), and each connect points it at its own log
// through redisLog (the last one wins; there is one outside tests). Until
// then, and in the commands that have no log, the messages are dropped.
type redisLogger struct{}

var (
	redisLog       atomic.Pointer[slog.Logger]
	setRedisLogger sync.Once
)

// quietRedis puts redisLogger in place of go-redis' default logger.
func quietRedis() { setRedisLogger.Do(func() { redis.SetLogger(redisLogger{}) }) }

func (redisLogger) Printf(ctx context.Context, format string, v ...any) {
	if l := redisLog.Load(); l != nil {
		l.DebugContext(ctx, "go-redis: "+fmt.Sprintf(format, v...))
	}
}

// secrets returns the credentials in the URLs, for redaction.
func (b *backendFlags) secrets() []string {
	return append(urlSecrets(b.redisURL), urlSecrets(b.dbURL)...)
}

// open connects to Redis and the database. Its errors never show a
// password of the URLs, whatever their form.
func (b *backendFlags) open(ctx context.Context, log *slog.Logger) (*backends, error) {
	bk, err := b.connect(ctx, log)
	return bk, (secrets{}).add(b.secrets()...).err(err)
}

// check refuses a bad --redis-prefix and the URLs that stock.Dial or
// store.Open would refuse, before the command starts anything.
func (b *backendFlags) check() error {
	if b.prefix == "" || strings.ContainsAny(b.prefix, "{} \t\r\n") {
		return usagef("--redis-prefix: %q must be non-empty, without braces or spaces", b.prefix)
	}
	return checkURLs(b.redisURL, b.dbURL)
}

// connect opens what b names; b.check said yes to it.
func (b *backendFlags) connect(ctx context.Context, log *slog.Logger) (*backends, error) {
	redisLog.Store(log)
	quietRedis()
	bk := &backends{}
	var err error
	if b.redisURL == "" {
		url, stop, err := startEmbeddedRedis()
		if err != nil {
			return nil, err
		}
		bk.closers = append(bk.closers, stop)
		log.Info("embedded redis started (pass --redis to use a real server)", "url", url)
		b.redisURL = url
	}
	bk.rdb, err = stock.Dial(ctx, b.redisURL)
	if err != nil {
		bk.close()
		return nil, fmt.Errorf("--redis: %w", err)
	}
	bk.closers = append(bk.closers, bk.rdb.Close)
	bk.store, err = store.Open(ctx, b.dbURL)
	if err != nil {
		bk.close()
		return nil, fmt.Errorf("--db: %w", err)
	}
	bk.closers = append(bk.closers, bk.store.Close)
	bk.engine = stock.New(bk.rdb, stock.Config{Prefix: b.prefix, AckReplicas: b.ack.replicas, AckTimeout: b.ack.timeout})
	bk.closers = append(bk.closers, func() error { bk.engine.Close(); return nil })
	if err := bk.engine.Preload(ctx); err != nil {
		bk.close()
		return nil, fmt.Errorf("load scripts into redis: %w", err)
	}
	return bk, nil
}

// workerEngine returns an engine on a Redis client of its own for the
// order worker, so that the worker's reads never take, nor wait for, the
// connections of the API's grabs.
func (bk *backends) workerEngine(ctx context.Context, b *backendFlags) (*stock.Engine, error) {
	rdb, err := stock.Dial(ctx, b.redisURL, 8)
	if err != nil {
		return nil, (secrets{}).add(b.secrets()...).err(fmt.Errorf("--redis: %w", err))
	}
	e := stock.New(rdb, stock.Config{Prefix: b.prefix})
	bk.closers = append(bk.closers, rdb.Close, func() error { e.Close(); return nil })
	return e, nil
}

// close releases everything in reverse order of opening.
func (bk *backends) close() error {
	var errs []error
	for i := len(bk.closers) - 1; i >= 0; i-- {
		errs = append(errs, bk.closers[i]())
	}
	bk.closers = nil
	return errors.Join(errs...)
}

// startEmbeddedRedis starts miniredis on a loopback port: a Redis-protocol
// server in this process that runs the same Lua scripts as Redis.
func startEmbeddedRedis() (url string, stop func() error, err error) {
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return "", nil, fmt.Errorf("start embedded redis: %w", err)
	}
	return "redis://" + m.Addr(), func() error { m.Close(); return nil }, nil
}

// stoppedEarly is the error of a command whose backends failed to open: nil
// when that was because it was told to stop (SIGTERM, SIGINT) meanwhile,
// which is no failure (a supervisor that stops a starting process must not
// see exit status 1).
func stoppedEarly(ctx context.Context, log *slog.Logger, err error) error {
	if ctx.Err() != nil {
		log.Info("stopped before it started", "err", err)
		return nil
	}
	return err
}
