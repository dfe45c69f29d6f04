// Package compare measures the grab strategies that flash-sale write-ups
// argue about, side by side on this machine, and counts what each really
// sold: the lock-granularity table of the seeds (section 4.2: global lock
// 3,200 QPS, per-item lock 18,500, per-user lock 42,000), made live.
//
// Each strategy serves the grab endpoint of the API (POST
// /api/v1/activities/{id}/grab with X-User-ID; 202 new order, 200 the
// user's order, 409 sold_out, 503 busy), so one load generator crowd
// (package loadgen) drives them all alike. A sale's stock is split over a
// few items (goods), and each user wants item (user id mod items): with a
// single item, a global lock and an item lock would be the same lock.
//
//	db-only        one transaction: UPDATE ... WHERE remaining > 0 takes the
//	               item's row lock; then check the user has no order, insert
//	global-lock    one lock for everything (lock:seckill); inside, read stock
//	               and buyer from Redis, write the order, decrement
//	activity-lock  the same with one lock per item, and the database write
//	               carries the lock's fencing token, so that a holder whose
//	               lease ran out cannot write
//	user-lock      one lock per user; the stock is read, then written back
//	               minus one (GET, SET): stops double clicks, not oversell
//	naive          no lock: GET the stock; if > 0, write the order, then
//	               DECR; the buyer is checked with the GET, recorded last
//	lua            the service's grab path: package stock's Lua script with
//	               combined batches, and the service's worker writing the
//	               order stream to the orders table during the run
//
// Locks come from package lock, with a fixed lease (LockTTL, no watchdog)
// and a bounded wait (LockWait, then 503 busy). The lua strategy calls the
// stock engine directly, without the service's in-process sold-out flag,
// so that every strategy does its own work for every request.
//
// The first five record orders in the comparison's own table,
// compare_orders, which has no unique index: violations show instead of
// being refused by the database. Every count comes from the database and
// Redis after the crowd, not from what the users were told.
package compare

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Strategy names, in the order of the table.
const (
	DBOnly       = "db-only"
	GlobalLock   = "global-lock"
	ActivityLock = "activity-lock"
	UserLock     = "user-lock"
	Naive        = "naive"
	Lua          = "lua"
)

// All lists the strategies in the order of the table.
var All = []string{DBOnly, GlobalLock, ActivityLock, UserLock, Naive, Lua}

// Safe reports whether a strategy is meant never to oversell nor to sell
// twice to one user. The unsafe ones are there to show what goes wrong.
func Safe(strategy string) bool {
	return strategy != UserLock && strategy != Naive
}

// Defaults of Config.
const (
	DefaultRedis       = "redis://127.0.0.1:6379"
	DefaultStock       = 100
	DefaultItems       = 4
	DefaultUsers       = 5000
	DefaultConcurrency = 64
	DefaultRepeatShare = 0.2
	DefaultRounds      = 3
	DefaultDuration    = 5 * time.Second
	DefaultLockWait    = 200 * time.Millisecond
	DefaultLockTTL     = 3 * time.Second
	DefaultDrain       = 30 * time.Second
)

// Config describes a comparison. Zero values take the defaults; with them
// a run of all six strategies takes well under two minutes on two cores.
type Config struct {
	// DB is the database URL: postgres://, mysql:// or sqlite:// (the
	// forms of the service's --db). The comparison creates its tables
	// compare_stock and compare_orders there; the lua strategy also uses
	// the service's own tables (activities, orders). Default: a new SQLite
	// file in a temporary directory, removed at the end.
	DB string
	// Redis is the Redis URL, redis://host:port[/db]. Default
	// DefaultRedis.
	Redis string
	// Prefix namespaces every Redis key of the run; they are deleted at the
	// end. No '{', '}' or glob characters. Default "compare-" + random hex.
	Prefix string
	// Strategies to run, in this order. Default All.
	Strategies []string

	// Stock is the number of units on sale, split evenly over Items.
	// Default 100.
	Stock int64
	// Items is the number of goods the stock is split over; user u wants
	// item u mod Items. Default 4.
	Items int
	// Buckets is the number of buckets each item of the lua strategy (the
	// service's grab path) splits its stock into in Redis (see
	// seckill.Activity.Buckets). Default 1; the other strategies ignore it.
	Buckets int
	// Users is the size of the crowd. Default 5000.
	Users int
	// Concurrency is the number of connections of the crowd. Default 64.
	Concurrency int
	// RepeatShare is the share of requests that are a user clicking again
	// (see loadgen.Config). Default 0.2; negative means none.
	RepeatShare float64
	// Requests bounds the grabs sent per strategy. Default 5 * Users: the
	// first Users / (1 - RepeatShare) requests mix first clicks with
	// repeats; after them every user has clicked, and the crowd goes on
	// clicking (repeats only), as the looping threads of a JMeter run do.
	// A crowd of a few thousand requests is over in a fraction of a second,
	// too short for a steady rate.
	Requests int64
	// Duration caps the crowd of each round of a strategy. Default 5s.
	Duration time.Duration
	// Timeout bounds one request of the crowd: one that takes longer
	// counts as failed (loadgen.Config.Timeout). Default 5s.
	Timeout time.Duration
	// Rounds is how often each strategy is measured, on a fresh sale each
	// time; the rounds go through all strategies in turn, so that a change
	// in the load of a shared machine touches them all alike. Default 3.
	Rounds int
	// Seed makes the crowd reproducible; every strategy gets the same
	// crowd. Default: random, one per run.
	Seed uint64

	// LockWait bounds how long a grab waits for a lock before it answers
	// 503 unavailable, busy (the seeds: 100-200 ms). Default 200ms.
	LockWait time.Duration
	// LockTTL is the fixed lease of every lock; there is no watchdog.
	// Default 3s.
	LockTTL time.Duration
	// Drain bounds the wait for the lua strategy's worker to write the
	// accepted orders to the database. Default 30s.
	Drain time.Duration

	// Log receives progress (one line per strategy) and internal errors.
	// Default: discarded.
	Log *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	if c.Redis == "" {
		c.Redis = DefaultRedis
	}
	if c.Prefix == "" {
		c.Prefix = "compare-" + randHex(6)
	}
	if strings.ContainsAny(c.Prefix, "{}*?[]\\") {
		return c, fmt.Errorf("compare: Prefix %q must not contain braces or glob characters", c.Prefix)
	}
	if len(c.Strategies) == 0 {
		c.Strategies = All
	}
	for _, s := range c.Strategies {
		if !slices.Contains(All, s) {
			return c, fmt.Errorf("compare: unknown strategy %q: want one of %s", s, strings.Join(All, ", "))
		}
	}
	if c.Stock == 0 {
		c.Stock = DefaultStock
	}
	if c.Items == 0 {
		c.Items = DefaultItems
	}
	if c.Users == 0 {
		c.Users = DefaultUsers
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	switch {
	case c.RepeatShare == 0:
		c.RepeatShare = DefaultRepeatShare
	case c.RepeatShare < 0:
		c.RepeatShare = 0
	}
	if c.Rounds == 0 {
		c.Rounds = DefaultRounds
	}
	if c.Duration == 0 {
		c.Duration = DefaultDuration
	}
	if c.LockWait == 0 {
		c.LockWait = DefaultLockWait
	}
	if c.LockTTL == 0 {
		c.LockTTL = DefaultLockTTL
	}
	if c.Drain == 0 {
		c.Drain = DefaultDrain
	}
	switch {
	case c.Items < 1 || c.Stock < int64(c.Items):
		return c, errors.New("compare: need at least one item and one unit per item")
	case c.Users < 1 || c.Concurrency < 1 || c.Rounds < 1 || c.Requests < 0 || c.Duration < 0:
		return c, errors.New("compare: Users, Concurrency and Rounds must be positive, Requests and Duration not negative")
	case c.RepeatShare >= 1:
		return c, errors.New("compare: RepeatShare must be below 1")
	case c.LockWait < 0 || c.LockTTL < time.Millisecond || c.LockTTL <= c.LockWait:
		return c, errors.New("compare: LockTTL must be positive and longer than LockWait")
	}
	if c.Requests == 0 {
		c.Requests = 5 * int64(c.Users)
	}
	if c.Seed == 0 {
		c.Seed = rand.Uint64() | 1
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// Run measures each strategy in turn, Rounds times: a fresh sale with the
// same stock, served on a loopback port, the same crowd, then the counts
// from the database and Redis. It stops at the first error or when ctx
// ends, and then returns the rounds measured until then with the error.
func Run(ctx context.Context, cfg Config) (*Table, error) {
	b, err := Open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	t := b.newTable()
	rounds := make(map[string][]Round)
	err = func() error {
		for range b.cfg.Rounds {
			for _, name := range b.cfg.Strategies {
				r, err := b.Measure(ctx, name)
				if err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
				rounds[name] = append(rounds[name], r)
			}
		}
		return nil
	}()
	for _, name := range b.cfg.Strategies {
		if len(rounds[name]) > 0 {
			t.Rows = append(t.Rows, newRow(name, rounds[name]))
		}
	}
	t.finish()
	return t, errors.Join(err, b.Close())
}
