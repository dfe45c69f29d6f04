package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/seckilldev/seckill/compare"
)

type compareFlags struct {
	strategies string
	items      int
	rounds     int
	lockWait   time.Duration
	lockTTL    time.Duration
	results    string
}

func (f *compareFlags) register(fs flagSet) {
	fs.StringVar(&f.strategies, "strategies", strings.Join(compare.All, ","), "with --compare: the strategies to run, in order")
	fs.IntVar(&f.items, "items", compare.DefaultItems, "with --compare: goods the stock is split over (user u wants item u mod items)")
	fs.IntVar(&f.rounds, "rounds", compare.DefaultRounds, "with --compare: rounds per strategy (the table shows medians)")
	fs.DurationVar(&f.lockWait, "lock-wait", compare.DefaultLockWait, "with --compare: longest lock wait before a grab answers busy")
	fs.DurationVar(&f.lockTTL, "lock-ttl", compare.DefaultLockTTL, "with --compare: the fixed lock lease")
	fs.StringVar(&f.results, "results", "", "with --compare: also save the results as JSON to `FILE`, which the dashboard of seckill serve --compare-results FILE charts (serve reads "+defaultCompareResults+" by default)")
}

// runCompare runs the lock-granularity comparison. Flags the user did not
// set take the comparison's own defaults (a smaller crowd than a bench).
func runCompare(ctx context.Context, c benchConfig, set map[string]bool, stdout, stderr io.Writer) error {
	if c.cmp.results != "" {
		// Found out now, not after minutes of measuring.
		if fi, err := os.Stat(filepath.Dir(c.cmp.results)); err != nil || !fi.IsDir() {
			return usagef("--results: %s is not in an existing directory", c.cmp.results)
		}
	}
	// Its servers answer, or it does not start (compare.Run's errors
	// cannot tell a start from a run).
	redisURL := c.redisURL
	if redisURL == "" {
		redisURL = compare.DefaultRedis
	}
	if err := probe(ctx, redisURL, c.dbURL); err != nil {
		return err
	}
	cfg := compare.Config{DB: c.dbURL, Redis: c.redisURL, Strategies: strings.Split(c.cmp.strategies, ","),
		Items: c.cmp.items, Rounds: c.cmp.rounds, LockWait: c.cmp.lockWait, LockTTL: c.cmp.lockTTL,
		Log: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	if set["stock"] {
		cfg.Stock = c.stock
	}
	cfg.Buckets = c.buckets
	if set["users"] {
		cfg.Users = c.users
	}
	if set["concurrency"] {
		cfg.Concurrency = c.concurrency
	}
	if set["repeat"] {
		cfg.RepeatShare = c.repeat
		if c.repeat == 0 {
			cfg.RepeatShare = -1 // compare's "none"
		}
	}
	if set["requests"] {
		cfg.Requests = c.requests
	}
	if set["duration"] {
		cfg.Duration = c.duration
	}
	t, err := compare.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if c.cmp.results != "" {
		if err := t.Save(c.cmp.results); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "results saved to %s: `seckill serve --compare-results %[1]s` charts them at /dashboard/\n", c.cmp.results)
	}
	if c.jsonOut {
		return writeJSON(stdout, t)
	}
	return t.Write(stdout)
}
