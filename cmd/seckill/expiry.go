package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill/expiry"
	"github.com/seckilldev/seckill/lock"
	goredislock "github.com/seckilldev/seckill/lock/goredis"
	"github.com/seckilldev/seckill/lock/lockprom"
)

// expiryFlags configure the expiry job of serve and worker. The zero value
// runs it with expiry's defaults; the flags refuse values out of bounds as
// they are parsed.
type expiryFlags struct {
	off   bool          // --expiry=false
	lease time.Duration // --expiry-lease; zero: the default
	batch int           // --expiry-batch; zero: the default
}

func (f *expiryFlags) register(fs flagSet) {
	fs.BoolFunc("expiry", "run the job that expires unpaid orders: every process that runs it stands by, one leads (default true; --expiry=false: not in this process)", func(s string) error {
		on, err := strconv.ParseBool(s)
		f.off = !on
		return err
	})
	fs.Func("expiry-lease", "lease of the expiry job's leader, renewed every third of it: a leader that dies is replaced within it, 100ms to 1h (default 15s)", func(s string) error {
		d, err := time.ParseDuration(s)
		switch {
		case err != nil:
			return err
		case d < 100*time.Millisecond || d > time.Hour:
			return fmt.Errorf("%v is not between 100ms and 1h", d)
		}
		f.lease = d
		return nil
	})
	fs.Func("expiry-batch", "orders the expiry job expires in one transaction, 1 to 500 (default 500)", func(s string) error {
		n, err := strconv.Atoi(s)
		switch {
		case err != nil:
			return errors.New("not an integer")
		case n < 1 || n > 500:
			return fmt.Errorf("%d is not between 1 and 500", n)
		}
		f.batch = n
		return nil
	})
}

// config returns the job's configuration; prefix is the Redis prefix, which
// names the job's lock and fence.
func (f *expiryFlags) config(prefix string) (expiry.Config, error) {
	c := expiry.Config{Name: prefix + ":expiry", Lease: f.lease, Batch: f.batch}
	if !f.off && len(c.Name) > expiry.MaxName {
		return c, usagef("--redis-prefix: %q is too long to name the expiry job's lock (at most %d bytes)", prefix, expiry.MaxName-len(":expiry"))
	}
	return c, nil
}

// newLocks returns the process's lock client, its keys under the Redis
// prefix, its metrics registered with reg.
func newLocks(rdb redis.UniversalClient, prefix string, reg prometheus.Registerer) *lock.Client {
	m := lockprom.New("seckill")
	reg.MustRegister(m)
	return lock.New(goredislock.New(rdb), lock.WithPrefix(prefix+":lock"), lock.WithHooks(m.Hooks()))
}

// startExpiry runs the expiry job (unless --expiry=false) until ctx ends;
// wg waits for it.
func startExpiry(ctx context.Context, wg *sync.WaitGroup, f *expiryFlags, cfg expiry.Config, bk *backends,
	locks *lock.Client, log *slog.Logger, reg prometheus.Registerer) error {
	if f.off {
		return nil
	}
	j, err := expiry.New(bk.store, bk.engine, locks, cfg, log, expiry.NewMetrics(reg))
	if err != nil {
		return err
	}
	wg.Go(func() { _ = j.Run(ctx) })
	return nil
}
