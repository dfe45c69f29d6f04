// Command lockbench compares the lock with redsync and redislock on one
// Redis, in one run, and prints the ratios: uncontended cycles, contention
// within one process, and contention across processes (it starts copies of
// itself). From lock/tests:
//
//	go run ./cmd/lockbench -rounds 5 -d 1s -dc 2s -procs 8 -pg 8
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/seckilldev/seckill/lock/tests/bench"
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
	flag.DurationVar(&cfg.Critical, "cs", time.Millisecond, "critical section of the contended runs")
	flag.IntVar(&cfg.Procs, "procs", 8, "processes of the contended run across processes (0: skip)")
	flag.IntVar(&cfg.ProcGoroutines, "pg", 8, "goroutines per process of the contended run across processes")
	flag.DurationVar(&cfg.Multi, "dp", 3*time.Second, "contended run across processes per locker per round (0: skip)")
	sections := flag.String("sections", "sleep,spin", "critical sections of the contended runs: sleep (time.Sleep), spin (busy loop)")
	lockers := flag.String("lockers", strings.Join(bench.All, ","), "lockers to compare")
	child := flag.Bool("child", false, "run as one process of the contended run across processes (started by lockbench)")
	prefix := flag.String("prefix", "", "key prefix (a child's)")
	start := flag.Int64("start", 0, "when to start, in Unix nanoseconds (a child's)")
	spin := flag.Bool("spin", false, "busy-loop critical section (a child's)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of this process to this file")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if *child {
		r, err := bench.Child(ctx, bench.ChildConfig{Locker: *lockers, Addr: cfg.Addr, Prefix: *prefix, Conns: cfg.Conns,
			Goroutines: cfg.Goroutines, Start: time.Unix(0, *start), Duration: cfg.Contended, Critical: cfg.Critical, Spin: *spin})
		if err != nil {
			return err
		}
		return json.NewEncoder(os.Stdout).Encode(r)
	}

	cfg.Lockers = strings.Split(*lockers, ",")
	cfg.Sections = strings.Split(*sections, ",")
	cfg.Prefix = "lockbench:" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cfg.Exe = exe
	fmt.Printf("lockbench %s, %s/%s, %d CPUs, GOMAXPROCS %d, Redis %s\n",
		time.Now().Format(time.DateTime), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0), cfg.Addr)
	rep, err := bench.Run(ctx, cfg, os.Stdout)
	if rep != nil {
		rep.Print(os.Stdout)
	}
	return err
}
