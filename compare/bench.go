package compare

import (
	"context"
	crand "crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/idgen"
	"github.com/seckilldev/seckill/loadgen"
	"github.com/seckilldev/seckill/lock"
	"github.com/seckilldev/seckill/lock/goredis"
	"github.com/seckilldev/seckill/store"
)

// Bench holds what the sales of one comparison share: the database, Redis,
// the lock client and the order id generator. Open it, Prepare a sale per
// strategy (or let Measure do it), Close it at the end.
type Bench struct {
	cfg    Config
	db     *sql.DB
	d      *dialect
	rdb    *redis.Client
	locks  *lock.Client
	ids    *idgen.Generator
	tmpDir string // the default SQLite database lives here

	storeOnce sync.Once
	store     seckill.Store // the service's store, for the lua strategy
	storeErr  error
}

// Open connects to the database and Redis of cfg and creates the
// comparison tables if they are missing.
func Open(ctx context.Context, cfg Config) (*Bench, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	b := &Bench{cfg: cfg, ids: idgen.New(rand.Int64N(idgen.MaxNode + 1))}
	if b.cfg.DB == "" {
		if b.tmpDir, err = os.MkdirTemp("", "seckill-compare-"); err != nil {
			return nil, fmt.Errorf("compare: %w", err)
		}
		b.cfg.DB = "sqlite://" + filepath.Join(b.tmpDir, "compare.db")
	}
	if b.db, b.d, err = openDB(ctx, b.cfg.DB); err != nil {
		b.Close()
		return nil, err
	}
	opt, err := redis.ParseURL(b.cfg.Redis)
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("compare: bad redis URL: %w", err)
	}
	if opt.PoolSize == 0 {
		// The seeds' advice: a pool at least 1.5 times the concurrency.
		opt.PoolSize = 2*cfg.Concurrency + 16
	}
	b.rdb = redis.NewClient(opt)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := b.rdb.Ping(pctx).Err(); err != nil {
		b.Close()
		return nil, fmt.Errorf("compare: redis at %s does not answer: %w", opt.Addr, err)
	}
	b.locks = lock.New(goredis.New(b.rdb), lock.WithPrefix(b.cfg.Prefix+":lock:"))
	return b, nil
}

// Config returns the configuration in force, defaults filled in.
func (b *Bench) Config() Config { return b.cfg }

// Close deletes the run's Redis keys, closes the connections and removes
// the default database. The comparison tables of a given database stay.
func (b *Bench) Close() error {
	var errs []error
	if b.locks != nil {
		errs = append(errs, b.locks.Close())
	}
	if b.rdb != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		errs = append(errs, deleteKeys(ctx, b.rdb, b.cfg.Prefix+":*"))
		cancel()
		errs = append(errs, b.rdb.Close())
	}
	if b.store != nil {
		errs = append(errs, b.store.Close())
	}
	if b.db != nil {
		errs = append(errs, b.db.Close())
	}
	if b.tmpDir != "" {
		errs = append(errs, os.RemoveAll(b.tmpDir))
	}
	return errors.Join(errs...)
}

// serviceStore opens the service's store on the same database, once.
func (b *Bench) serviceStore(ctx context.Context) (seckill.Store, error) {
	b.storeOnce.Do(func() {
		b.store, b.storeErr = store.Open(ctx, b.cfg.DB)
	})
	return b.store, b.storeErr
}

// deleteKeys deletes the keys matching pattern.
func deleteKeys(ctx context.Context, rdb *redis.Client, pattern string) error {
	iter := rdb.Scan(ctx, 0, pattern, 1000).Iterator()
	var batch []string
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := rdb.Unlink(ctx, batch...).Err()
		batch = batch[:0]
		return err
	}
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == 500 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := iter.Err(); err != nil {
		return err
	}
	return flush()
}

// Measure runs one round of a strategy: it prepares a fresh sale, serves
// it on a loopback port, releases the crowd, and counts what was sold.
func (b *Bench) Measure(ctx context.Context, strategy string) (Round, error) {
	log := b.cfg.Log.With("strategy", strategy)
	log.Info("preparing sale")
	s, err := b.Prepare(ctx, strategy)
	if err != nil {
		return Round{}, err
	}
	defer s.Close()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return Round{}, fmt.Errorf("compare: %w", err)
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	shutdown := func() error {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		err := srv.Shutdown(sctx)
		if serr := <-served; !errors.Is(serr, http.ErrServerClosed) {
			err = errors.Join(err, serr)
		}
		return err
	}

	log.Info("crowd released", "users", b.cfg.Users, "requests", b.cfg.Requests, "connections", b.cfg.Concurrency)
	cpu0, redis0 := processCPU(), b.redisCPU(ctx)
	rep, err := loadgen.Run(ctx, loadgen.Config{
		URL:         "http://" + ln.Addr().String(),
		ActivityID:  s.ID(),
		Users:       b.cfg.Users,
		Concurrency: b.cfg.Concurrency,
		RepeatShare: b.cfg.RepeatShare,
		Requests:    b.cfg.Requests,
		Duration:    b.cfg.Duration,
		Timeout:     b.cfg.Timeout,
		Seed:        b.cfg.Seed,
	})
	cpu, redisCPU := processCPU()-cpu0, b.redisCPU(ctx)-redis0
	if serr := shutdown(); err == nil && serr != nil {
		err = fmt.Errorf("compare: stop the server: %w", serr)
	}
	if err != nil {
		return Round{}, err
	}
	if err := ctx.Err(); err != nil {
		return Round{}, err
	}
	t, err := s.Count(ctx)
	if err != nil {
		return Round{}, err
	}
	r := newRound(rep, t)
	if rep.Elapsed > 0 {
		r.CPU = cpu.Seconds() / rep.Elapsed.Seconds()
		r.RedisCPU = redisCPU.Seconds() / rep.Elapsed.Seconds()
	}
	log.Info("measured", "requests_per_sec", int64(r.Throughput), "sold", r.Sold, "oversold", r.Oversold,
		"duplicates", r.Duplicates)
	return r, nil
}

// redisCPU returns the CPU time Redis has used so far (INFO cpu), or 0 if
// it cannot tell.
func (b *Bench) redisCPU(ctx context.Context) time.Duration {
	info, err := b.rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return 0
	}
	var sum float64
	for line := range strings.Lines(info) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_sys" || k == "used_cpu_user" {
			f, _ := strconv.ParseFloat(v, 64)
			sum += f
		}
	}
	return time.Duration(sum * float64(time.Second))
}

func randHex(n int) string {
	buf := make([]byte, n)
	_, _ = crand.Read(buf)
	return hex.EncodeToString(buf)
}
