package main

import (
	"context"
	"io"
	"os"
	"strings"
	"time"

	"github.com/seckilldev/seckill/faults/soak"
)

// soakCmd runs the long fault soak: API and worker processes of this very
// binary on real servers, a crowd across them, kills and pauses on a
// schedule, then the invariant checker.
func soakCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var (
		cfg    soak.Config
		faults string
		logTo  string
	)
	fs := newFlagSet("soak", stderr)
	fs.StringVar(&cfg.RedisURL, "redis", "", "Redis URL of the services (required: a real server), see Redis URLs below")
	fs.StringVar(&cfg.DBURL, "db", "", "database URL of the services (required: postgres://, mysql:// or sqlite://), see Database URLs below")
	fs.StringVar(&cfg.Prefix, "redis-prefix", "", "Redis key prefix (default: soak-<random>)")
	fs.Int64Var(&cfg.Requests, "requests", 1_000_000, "grabs over all API instances")
	fs.IntVar(&cfg.Users, "users", 0, "distinct users (default: requests * 0.8 / apis)")
	fs.Int64Var(&cfg.Stock, "stock", 0, "stock (default: 9/10 of the users)")
	fs.IntVar(&cfg.APIs, "apis", 3, "API instances")
	fs.IntVar(&cfg.Workers, "workers", 2, "order workers")
	fs.IntVar(&cfg.Concurrency, "concurrency", 32, "connections per API instance")
	fs.Float64Var(&cfg.Rate, "rate", 5000, "grabs per second over all instances; negative: no bound")
	fs.DurationVar(&cfg.FaultEvery, "fault-every", 10*time.Second, "time between faults; negative: none")
	fs.StringVar(&faults, "faults", "worker-kill,api-kill,worker-pause", "faults to inject, in turn")
	fs.DurationVar(&cfg.ClaimIdle, "claim-idle", time.Second, "the workers' --claim-idle")
	fs.IntVar(&cfg.Batch, "batch", 200, "the workers' --batch")
	fs.DurationVar(&cfg.DrainTimeout, "drain-timeout", 5*time.Minute, "bound on the drain after the crowd")
	fs.StringVar(&logTo, "log", "", "file for the processes' log lines (default: none)")
	if err := fs.parse(args); err != nil {
		return err
	}
	switch {
	case cfg.RedisURL == "":
		return usagef("--redis is required: the soak runs several processes on one real Redis")
	case cfg.DBURL == "":
		return usagef("--db is required: the soak runs several processes on one database")
	case cfg.Requests < 1:
		return usagef("--requests: %d is not positive", cfg.Requests)
	case cfg.APIs < 1 || cfg.APIs > 16:
		return usagef("--apis: %d is not between 1 and 16", cfg.APIs)
	case cfg.Workers < 1 || cfg.Workers > 16:
		return usagef("--workers: %d is not between 1 and 16", cfg.Workers)
	}
	if err := checkURLs(cfg.RedisURL, cfg.DBURL); err != nil {
		return err
	}
	if err := probe(ctx, cfg.RedisURL, cfg.DBURL); err != nil {
		return err
	}
	for _, f := range strings.Split(faults, ",") {
		if f = strings.TrimSpace(f); f != "" {
			cfg.Faults = append(cfg.Faults, soak.Fault(f))
		}
	}
	exe, err := selfBinary()
	if err != nil {
		return notStarted(err)
	}
	cfg.Binary = exe
	if logTo != "" {
		f, err := os.Create(logTo)
		if err != nil {
			return usagef("--log: %v", err)
		}
		defer f.Close()
		cfg.Log = f
	}
	_, err = soak.Run(ctx, cfg, stdout)
	return err
}
