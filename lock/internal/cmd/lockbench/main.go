// Command lockbench compares the lock with redsync and redislock on one
// Redis, in one run, and prints the ratios.
//
//	go run ./lock/internal/cmd/lockbench -rounds 10 -d 1s -dc 2s
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"time"

	"github.com/seckilldev/seckill/lock/internal/bench"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "lockbench:", err)
		os.Exit(1)
	}
}

func run() error {
	cfg := bench.Config{}
	flag.StringVar(&cfg.Addr, "addr", "127.0.0.1:6379", "Redis address")
	flag.IntVar(&cfg.Goroutines, "g", 64, "goroutines")
	flag.IntVar(&cfg.Conns, "conns", 64, "go-redis pool size")
	flag.IntVar(&cfg.Rounds, "rounds", 5, "rounds")
	flag.DurationVar(&cfg.Uncontended, "d", 2*time.Second, "uncontended run per locker per round (0: skip)")
	flag.DurationVar(&cfg.Contended, "dc", 3*time.Second, "contended run per locker per round (0: skip)")
	flag.DurationVar(&cfg.Critical, "cs", time.Millisecond, "critical section of the contended run")
	sections := flag.String("sections", "sleep,spin", "critical sections of the contended run: sleep (time.Sleep), spin (busy loop)")
	lockers := flag.String("lockers", strings.Join(bench.All, ","), "lockers to compare")
	flag.Parse()
	cfg.Lockers = strings.Split(*lockers, ",")
	cfg.Sections = strings.Split(*sections, ",")
	cfg.Prefix = fmt.Sprintf("lockbench:%d:", time.Now().UnixNano())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	fmt.Printf("lockbench %s, %s/%s, %d CPUs, GOMAXPROCS %d, Redis %s\n",
		time.Now().Format(time.DateTime), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0), cfg.Addr)
	rep, err := bench.Run(ctx, cfg, os.Stdout)
	if rep != nil {
		rep.Print(os.Stdout)
	}
	return err
}
