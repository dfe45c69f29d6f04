package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/check"
	"github.com/seckilldev/seckill/stock"
	"github.com/seckilldev/seckill/store"
	"github.com/seckilldev/seckill/worker"
)

// drainFlags are the flags of `seckill bench --drain`, which measures the
// order worker alone: how fast one worker turns a backlog of accepted grabs
// into database rows.
type drainFlags struct {
	on         bool
	orders     int
	batch      int
	inline     bool
	cpuProfile string
}

func (f *drainFlags) register(fs flagSet) {
	fs.BoolVar(&f.on, "drain", false, "measure the order worker's drain rate: fill a new sale's order stream with --orders accepted grabs (the real grab script), then time one seckill worker process from its start until every order is in --db and acknowledged, and check the invariants")
	fs.IntVar(&f.orders, "orders", 200_000, "with --drain: accepted grabs in the backlog (one per user)")
	fs.IntVar(&f.batch, "worker-batch", 0, "with --drain: the worker's --batch (default: the worker's own)")
	fs.BoolVar(&f.inline, "drain-inline", false, "with --drain: run the worker in this process rather than as a seckill worker child process")
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "with --drain: write a CPU profile of the draining to `FILE` (runs the worker in this process)")
}

// check validates the drain flags; set holds the flags given.
func (f *drainFlags) check(c benchConfig, set map[string]bool) error {
	if !f.on {
		for _, name := range []string{"orders", "worker-batch", "drain-inline", "cpuprofile"} {
			if set[name] {
				return usagef("--%s is a flag of --drain", name)
			}
		}
		return nil
	}
	switch {
	case c.baseline || c.compare:
		return usagef("--drain is a run of its own: not with --baseline or --compare")
	case c.target != "":
		return usagef("--drain runs its own worker on --redis and --db: not with --target")
	case f.orders < 1 || f.orders > 10_000_000:
		return usagef("--orders: %d is not between 1 and 10000000", f.orders)
	case set["worker-batch"] && (f.batch < 1 || f.batch > 10000):
		return usagef("--worker-batch: %d is not between 1 and 10000", f.batch)
	}
	if f.cpuProfile != "" {
		if fi, err := os.Stat(filepath.Dir(f.cpuProfile)); err != nil || !fi.IsDir() {
			return usagef("--cpuprofile: %s is not in an existing directory", f.cpuProfile)
		}
		f.inline = true
	}
	return nil
}

// drainResult is what `seckill bench --drain --json` prints.
type drainResult struct {
	Engine  string  `json:"engine"`
	Orders  int     `json:"orders"`
	Fill    float64 `json:"fill_seconds"`
	Seconds float64 `json:"seconds"`
	Rate    float64 `json:"orders_per_second"`
	Worker  string  `json:"worker"`
	// WorkerCPU is the CPU time of the worker process, from its start
	// to its exit (in-process: of the whole process while draining).
	WorkerCPU float64       `json:"worker_cpu_seconds"`
	Load      string        `json:"load_average"`
	Checks    *check.Report `json:"checks"`
	OK        bool          `json:"ok"`
}

// runDrain fills a new activity's order stream with accepted grabs while no
// worker runs, then starts one worker and times it until the stream is
// drained: every entry delivered and acknowledged, which the worker does
// only after the database committed the order. The checker then compares
// the database and Redis with the grabs' answers.
func runDrain(ctx context.Context, c benchConfig, stdout, stderr io.Writer) error {
	say := func(format string, args ...any) { fmt.Fprintf(stderr, format+"\n", args...) }
	var cleanup []func()
	defer func() {
		for i := len(cleanup) - 1; i >= 0; i-- {
			cleanup[i]()
		}
	}()
	if c.redisURL == "" {
		say("warning: no --redis: the embedded Redis is built for demos, not speed")
		url, stop, err := startEmbeddedRedis()
		if err != nil {
			return notStarted(err)
		}
		cleanup = append(cleanup, func() { _ = stop() })
		c.redisURL = url
	}
	if c.dbURL == "" {
		dir, err := os.MkdirTemp("", "seckill-drain")
		if err != nil {
			return notStarted(err)
		}
		cleanup = append(cleanup, func() { os.RemoveAll(dir) })
		c.dbURL = "sqlite://" + filepath.Join(dir, "drain.db")
	}
	// A namespace of its own: no worker of another run reads this stream.
	c.prefix = "drain" + randomHex(4)

	st, err := store.Open(ctx, c.dbURL)
	if err != nil {
		return notStarted(fmt.Errorf("--db: %w", err))
	}
	cleanup = append(cleanup, func() { st.Close() })
	rdb, err := stock.Dial(ctx, c.redisURL)
	if err != nil {
		return notStarted(fmt.Errorf("--redis: %w", err))
	}
	cleanup = append(cleanup, func() { rdb.Close() })

	n := c.drain.orders
	a := seckill.Activity{Name: "drain bench", Stock: int64(n), StartsAt: time.Now().Add(-time.Second),
		EndsAt: time.Now().Add(time.Hour), PayWithin: 15 * time.Minute, Rebuy: true}
	if err := st.CreateActivity(ctx, &a); err != nil {
		return fmt.Errorf("create the sale: %w", err)
	}
	cleanup = append(cleanup, func() { deleteKeys(rdb, stock.KeysFor(c.prefix, a.ID)) })
	say("activity %d: %d units; filling its order stream with %d accepted grabs...", a.ID, n, n)
	fillStart := time.Now()
	answers, err := fill(ctx, rdb, c.prefix, a, n)
	if err != nil {
		return err
	}
	fillTook := time.Since(fillStart)
	say("filled in %s (%.0f grabs/s)", fillTook.Round(time.Millisecond), float64(n)/fillTook.Seconds())

	load := loadAverage()
	mode := "seckill worker process"
	if c.drain.inline {
		mode = "in-process worker"
	}
	say("load average %s; starting one %s...", load, mode)
	var stop func() (cpu time.Duration, err error)
	began := time.Now()
	if c.drain.inline {
		stop, err = startInlineWorker(ctx, c, stderr)
	} else {
		stop, err = startWorkerProcess(ctx, c, stderr)
	}
	if err != nil {
		return err
	}
	took, err := waitDrained(ctx, rdb, c.prefix, a.ID, began)
	cpu, serr := stop()
	if err == nil && serr != nil {
		err = serr
	}
	if err != nil {
		return err
	}
	res := drainResult{Engine: engineName(c.dbURL), Orders: n, Fill: fillTook.Seconds(), Seconds: took.Seconds(),
		Rate: float64(n) / took.Seconds(), Worker: mode, WorkerCPU: cpu.Seconds(), Load: load}
	say("drained in %s (%.0f orders/s); checking the invariants...", took.Round(time.Millisecond), res.Rate)

	db, err := check.Open(ctx, c.dbURL)
	if err != nil {
		return fmt.Errorf("--db: %w", err)
	}
	defer db.Close()
	res.Checks, err = check.Run(ctx, check.Config{DB: db, Redis: rdb, Prefix: c.prefix, ActivityID: a.ID,
		Answers: &check.Answers{ByUser: answers}})
	if err != nil {
		return err
	}
	res.OK = res.Checks.OK() && res.Checks.Sold() == int64(n)
	if c.jsonOut {
		if err := writeJSON(stdout, res); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "ENGINE\tORDERS\tDRAINED IN\tORDERS/s\tWORKER\tWORKER CPU\tLOAD AVERAGE BEFORE\n")
		fmt.Fprintf(tw, "%s\t%d\t%s\t%.0f\t%s\t%.2fs (%.1f µs/order)\t%s\n", res.Engine, n, took.Round(time.Millisecond), res.Rate, mode,
			res.WorkerCPU, 1e6*res.WorkerCPU/float64(n), load)
		_ = tw.Flush()
		fmt.Fprintln(stdout)
		_ = res.Checks.WriteTable(stdout)
	}
	if !res.OK {
		if res.Checks.Sold() != int64(n) {
			return fmt.Errorf("the database holds %d orders, want %d", res.Checks.Sold(), n)
		}
		return fmt.Errorf("invariants violated")
	}
	return nil
}

// fill loads the activity into Redis and grabs one unit for each of the
// users 1..n through stock.Engine.Grab, as the API does: the grab script
// marks each buyer and appends the order to the stream. It returns the order
// id each user was given.
func fill(ctx context.Context, rdb redis.UniversalClient, prefix string, a seckill.Activity, n int) (map[int64][]int64, error) {
	// Large combined batches: the fill is not what is measured.
	e := stock.New(rdb, stock.Config{Prefix: prefix, MaxBatch: 1000})
	defer e.Close()
	if _, err := e.Load(ctx, a, nil); err != nil {
		return nil, fmt.Errorf("load the sale into redis: %w", err)
	}
	ids := make([]int64, n)
	var next atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	for range 512 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				u := next.Add(1)
				if u > int64(n) {
					return
				}
				r, err := e.Grab(ctx, a, u)
				if err == nil && !r.New {
					err = fmt.Errorf("user %d already had order %d", u, r.OrderID)
				}
				if err != nil {
					once.Do(func() { firstErr = fmt.Errorf("grab: %w", err) })
					next.Store(int64(n))
					return
				}
				ids[u-1] = r.OrderID
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	answers := make(map[int64][]int64, n)
	for i, id := range ids {
		answers[int64(i+1)] = []int64{id}
	}
	return answers, nil
}

// waitDrained polls the stream until every entry is acknowledged and
// returns the time since began.
func waitDrained(ctx context.Context, rdb redis.UniversalClient, prefix string, id int64, began time.Time) (time.Duration, error) {
	const timeout = 10 * time.Minute
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		s, err := check.StreamStatus(ctx, rdb, prefix, id)
		if err == nil && s.Drained() {
			return time.Since(began), nil
		}
		if time.Since(began) > timeout {
			return 0, fmt.Errorf("not drained after %s: %v %v", timeout, s, err)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-tick.C:
		}
	}
}

// startWorkerProcess runs `seckill worker` on the bench's backends; stop
// sends SIGTERM, waits, and returns the CPU time the process used.
func startWorkerProcess(ctx context.Context, c benchConfig, stderr io.Writer) (stop func() (time.Duration, error), err error) {
	exe, err := selfBinary()
	if err != nil {
		return nil, err
	}
	args := []string{"worker", "--redis", c.redisURL, "--db", c.dbURL, "--redis-prefix", c.prefix, "--log-level", "warn"}
	if c.drain.batch > 0 {
		args = append(args, "--batch", strconv.Itoa(c.drain.batch))
	}
	cmd := exec.Command(exe, args...)
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the worker: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	return func() (time.Duration, error) {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case err := <-exited:
			if err != nil {
				return 0, fmt.Errorf("worker: %w", err)
			}
			return cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(), nil
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			<-exited
			return 0, errors.New("worker: did not stop within a minute of SIGTERM")
		}
	}, nil
}

// startInlineWorker runs a worker in this process, on backends of its own,
// with the CPU profile if one was asked for; stop returns the CPU time this
// process used meanwhile.
func startInlineWorker(ctx context.Context, c benchConfig, stderr io.Writer) (stop func() (time.Duration, error), err error) {
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	st, err := store.Open(ctx, c.dbURL)
	if err != nil {
		return nil, fmt.Errorf("--db: %w", err)
	}
	rdb, err := stock.Dial(ctx, c.redisURL)
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("--redis: %w", err)
	}
	e := stock.New(rdb, stock.Config{Prefix: c.prefix})
	var prof *os.File
	if c.drain.cpuProfile != "" {
		if prof, err = os.Create(c.drain.cpuProfile); err == nil {
			err = pprof.StartCPUProfile(prof)
		}
		if err != nil {
			e.Close()
			rdb.Close()
			st.Close()
			return nil, fmt.Errorf("--cpuprofile: %w", err)
		}
	}
	cpu0 := processCPU()
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = worker.New(st, e, worker.Config{Batch: c.drain.batch}, log, nil).Run(wctx)
	}()
	return func() (time.Duration, error) {
		cpu := processCPU() - cpu0
		if prof != nil {
			pprof.StopCPUProfile()
			prof.Close()
		}
		cancel()
		<-done
		e.Close()
		return cpu, errors.Join(rdb.Close(), st.Close())
	}, nil
}

// processCPU is the CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// deleteKeys removes an activity's keys from Redis: a backlog of a
// million entries is not left behind in a shared server.
func deleteKeys(rdb redis.UniversalClient, k stock.Keys) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, key := range []string{k.Orders, k.Buyers, k.Meta, k.Debt, k.Returned} {
		rdb.Del(ctx, key)
	}
}

// engineName is the database engine of a --db URL.
func engineName(dbURL string) string {
	scheme, _, _ := strings.Cut(dbURL, "://")
	return scheme
}

// loadAverage is the machine's load average over 1, 5 and 15 minutes, as
// uptime shows it ("" where /proc/loadavg is missing).
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
