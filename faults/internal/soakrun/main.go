// Command soakrun runs the soak (package soak) from the command line until
// `seckill soak` does:
//
//	go run ./faults/internal/soakrun -redis redis://127.0.0.1:6379 \
//	    -db 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable' -requests 1000000
//
// Without -bin it builds cmd/seckill first. It exits 0 when every
// invariant held, 1 when one did not, 2 on a bad command line.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/seckilldev/seckill/faults/soak"
)

func main() {
	var (
		cfg    soak.Config
		faults string
		logTo  string
	)
	flag.StringVar(&cfg.Binary, "bin", "", "seckill binary (default: go build ./cmd/seckill into a temporary directory)")
	flag.StringVar(&cfg.RedisURL, "redis", "redis://127.0.0.1:6379", "Redis URL of the service")
	flag.StringVar(&cfg.DBURL, "db", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "database URL of the service")
	flag.StringVar(&cfg.Prefix, "redis-prefix", "", "Redis key prefix (default: soak-<random>)")
	flag.Int64Var(&cfg.Requests, "requests", 1_000_000, "grabs over all API instances")
	flag.IntVar(&cfg.Users, "users", 0, "distinct users (default: requests * 0.8 / apis)")
	flag.Int64Var(&cfg.Stock, "stock", 0, "stock (default: 9/10 of the users)")
	flag.IntVar(&cfg.APIs, "apis", 3, "API instances")
	flag.IntVar(&cfg.Workers, "workers", 2, "order workers")
	flag.IntVar(&cfg.Concurrency, "concurrency", 32, "connections per API instance")
	flag.Float64Var(&cfg.Rate, "rate", 5000, "grabs per second over all instances; negative: no bound")
	flag.DurationVar(&cfg.FaultEvery, "fault-every", 10*time.Second, "time between faults; negative: none")
	flag.StringVar(&faults, "faults", "worker-kill,api-kill,worker-pause", "faults to inject, in turn")
	flag.DurationVar(&cfg.ClaimIdle, "claim-idle", time.Second, "the workers' --claim-idle")
	flag.IntVar(&cfg.Batch, "batch", 200, "the workers' --batch")
	flag.DurationVar(&cfg.DrainTimeout, "drain-timeout", 5*time.Minute, "bound on the drain after the crowd")
	flag.StringVar(&logTo, "log", "", "file for the processes' log lines (default: none)")
	flag.Parse()
	for _, f := range strings.Split(faults, ",") {
		if f = strings.TrimSpace(f); f != "" {
			cfg.Faults = append(cfg.Faults, soak.Fault(f))
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, cfg, logTo))
}

func run(ctx context.Context, cfg soak.Config, logTo string) int {
	if cfg.Binary == "" {
		dir, err := os.MkdirTemp("", "soak")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		cfg.Binary = filepath.Join(dir, "seckill")
		if out, err := exec.Command("go", "build", "-o", cfg.Binary, "github.com/seckilldev/seckill/cmd/seckill").CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
			return 1
		}
	}
	if logTo != "" {
		f, err := os.Create(logTo)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		defer f.Close()
		cfg.Log = f
	}
	_, err := soak.Run(ctx, cfg, os.Stdout)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, soak.ErrViolated):
		return 1
	}
	fmt.Fprintln(os.Stderr, err)
	return 1
}
