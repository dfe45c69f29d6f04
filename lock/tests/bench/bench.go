// Package bench measures the lock against go-redsync/redsync and
// bsm/redislock on the same Redis in the same run, and reports ratios. It is
// used by cmd/lockbench and by the benchmarks of this package; the other
// libraries are dependencies of this package only.
package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/seckilldev/seckill/lock"
	"github.com/seckilldev/seckill/lock/goredis"
	"github.com/seckilldev/seckill/lock/rueidislock"
)

// Locker is one library under test, with its own connections.
type Locker struct {
	Name string
	// Lock takes key; with wait it waits (polling libraries poll every 5 ms).
	Lock func(ctx context.Context, key string, wait bool) (unlock func(context.Context) error, err error)
	// Commands returns the number of commands sent to Redis so far.
	Commands func() int64
	Close    func()
}

// Names of the lockers, in report order.
const (
	LockRueidis = "lock+rueidis"
	LockGoRedis = "lock+goredis"
	Redsync     = "redsync"
	Redislock   = "redislock"
)

// RawRueidis is no lock library: SET NX PX and a compare-and-delete script
// sent with rueidis, the floor of any lock's cost (no fencing, no watchdog).
const RawRueidis = "raw-rueidis"

// FencedRueidis is no lock library either: one script that increments a
// counter and sets the key NX PX, and a compare-and-delete, sent with
// rueidis: the floor of a lock that issues fencing tokens (no line, no
// watchdog, a counter that is never deleted).
const FencedRueidis = "fenced-rueidis"

// All lists every locker name.
var All = []string{LockRueidis, LockGoRedis, Redsync, Redislock, RawRueidis, FencedRueidis}

// pollDelay is the retry interval given to the polling libraries when they
// must wait: short, to give them their best throughput.
const pollDelay = 5 * time.Millisecond

// counter is a go-redis hook that counts commands.
type counter struct{ n atomic.Int64 }

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}
func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

func goRedisClient(addr string, conns int) (*redis.Client, *counter) {
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: conns})
	n := &counter{}
	c.AddHook(n)
	return c, n
}

// countingRedis counts the scripts the lock runs (rueidis has no hooks).
type countingRedis struct {
	lock.Redis
	n atomic.Int64
}

func (c *countingRedis) EvalSHA(ctx context.Context, sha string, keys, args []string) (int64, error) {
	c.n.Add(1)
	return c.Redis.EvalSHA(ctx, sha, keys, args)
}

func (c *countingRedis) Eval(ctx context.Context, src string, keys, args []string) (int64, error) {
	c.n.Add(1)
	return c.Redis.Eval(ctx, src, keys, args)
}

func (c *countingRedis) EvalSHAStrings(ctx context.Context, sha string, keys, args []string) ([]string, error) {
	c.n.Add(1)
	return c.Redis.EvalSHAStrings(ctx, sha, keys, args)
}

func (c *countingRedis) EvalStrings(ctx context.Context, src string, keys, args []string) ([]string, error) {
	c.n.Add(1)
	return c.Redis.EvalStrings(ctx, src, keys, args)
}

func (c *countingRedis) Subscribe(ctx context.Context, channel string, ready func(), msg func(string)) error {
	c.n.Add(1)
	return c.Redis.Subscribe(ctx, channel, ready, msg)
}

// New connects the named locker to the Redis at addr; conns is the
// connection pool size of go-redis clients.
func New(name, addr, prefix string, conns int) (*Locker, error) {
	switch name {
	case LockRueidis:
		rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
		if err != nil {
			return nil, err
		}
		cr := &countingRedis{Redis: rueidislock.New(rc)}
		return ours(name, lock.New(cr, lock.WithPrefix(prefix)), cr.n.Load, rc.Close), nil
	case RawRueidis, FencedRueidis:
		rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
		if err != nil {
			return nil, err
		}
		return bare(name, rc, prefix), nil
	case LockGoRedis:
		gc, n := goRedisClient(addr, conns)
		return ours(name, lock.New(goredis.New(gc), lock.WithPrefix(prefix)), n.n.Load, func() { gc.Close() }), nil
	case Redislock:
		gc, n := goRedisClient(addr, conns)
		rl := redislock.New(gc)
		wait := &redislock.Options{RetryStrategy: redislock.LinearBackoff(pollDelay)}
		return &Locker{
			Name: name,
			Lock: func(ctx context.Context, key string, w bool) (func(context.Context) error, error) {
				opt := (*redislock.Options)(nil)
				if w {
					opt = wait
				}
				l, err := rl.Obtain(ctx, prefix+key, 30*time.Second, opt)
				if err != nil {
					return nil, err
				}
				return l.Release, nil
			},
			Commands: n.n.Load,
			Close:    func() { gc.Close() },
		}, nil
	case Redsync:
		gc, n := goRedisClient(addr, conns)
		rs := redsync.New(redsyncgoredis.NewPool(gc))
		return &Locker{
			Name: name,
			Lock: func(ctx context.Context, key string, w bool) (func(context.Context) error, error) {
				opts := []redsync.Option{redsync.WithExpiry(30 * time.Second), redsync.WithTries(1)}
				if w {
					opts = append(opts, redsync.WithTries(1<<30), redsync.WithRetryDelay(pollDelay))
				}
				m := rs.NewMutex(prefix+key, opts...)
				if err := m.LockContext(ctx); err != nil {
					return nil, err
				}
				return func(ctx context.Context) error {
					_, err := m.UnlockContext(ctx)
					return err
				}, nil
			},
			Commands: n.n.Load,
			Close:    func() { gc.Close() },
		}, nil
	}
	return nil, fmt.Errorf("bench: unknown locker %q", name)
}

// bare is raw-rueidis or fenced-rueidis on rc: no lock library, the floor
// of a lock's cost without fencing tokens and with them.
func bare(name string, rc rueidis.Client, prefix string) *Locker {
	var n atomic.Int64
	var seq atomic.Int64
	// raw: SET NX PX; the hold's value is v
	acquire := func(ctx context.Context, k, v string) (bool, error) {
		err := rc.Do(ctx, rc.B().Set().Key(k).Value(v).Nx().PxMilliseconds(30000).Build()).Error()
		if rueidis.IsRedisNil(err) {
			return false, nil
		}
		return err == nil, err
	}
	del := rueidis.NewLuaScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)
	if name == FencedRueidis {
		// fenced: the token from a counter next to the key, in the value
		// with the hold's id; the release compares the id
		fenced := rueidis.NewLuaScript(`local t = redis.call("incr", KEYS[2])
if redis.call("set", KEYS[1], ARGV[1] .. " " .. t, "nx", "px", 30000) then return t end
return 0`)
		acquire = func(ctx context.Context, k, v string) (bool, error) {
			t, err := fenced.Exec(ctx, rc, []string{k, k + ":fence"}, []string{v}).AsInt64()
			return t > 0, err
		}
		del = rueidis.NewLuaScript(`local v = redis.call("get", KEYS[1])
if v and string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. " " then return redis.call("del", KEYS[1]) else return 0 end`)
	}
	return &Locker{
		Name: name,
		Lock: func(ctx context.Context, key string, wait bool) (func(context.Context) error, error) {
			k := prefix + "{" + key + "}"
			v := strconv.FormatInt(seq.Add(1), 10)
			for {
				n.Add(1)
				ok, err := acquire(ctx, k, v)
				if err != nil {
					return nil, err
				}
				if ok {
					break
				}
				if !wait {
					return nil, errors.New(name + ": taken")
				}
				time.Sleep(pollDelay)
			}
			return func(ctx context.Context) error {
				n.Add(1)
				return del.Exec(ctx, rc, []string{k}, []string{v}).Error()
			}, nil
		},
		Commands: n.Load,
		Close:    rc.Close,
	}
}

func ours(name string, c *lock.Client, commands func() int64, closeRedis func()) *Locker {
	return &Locker{
		Name: name,
		Lock: func(ctx context.Context, key string, wait bool) (func(context.Context) error, error) {
			var l *lock.Lock
			var err error
			if wait {
				l, err = c.Lock(ctx, key)
			} else {
				l, err = c.TryLock(ctx, key)
			}
			if err != nil {
				return nil, err
			}
			return l.Unlock, nil
		},
		Commands: commands,
		Close: func() {
			c.Close()
			closeRedis()
		},
	}
}

// Result of one run of one scenario.
type Result struct {
	Ops      int64 // lock+unlock cycles
	Elapsed  time.Duration
	Commands int64
	Errors   int64
	CPU      time.Duration // used by this process (user+system)

	// Cycles and commands in the middle half of the run: its steady
	// state. Over the whole run, waiters that joined a line at its end
	// count their command and not their acquisition.
	MidOps, MidCommands int64
}

// CPUPerOp returns the CPU time this process spent per cycle.
func (r Result) CPUPerOp() time.Duration { return r.CPU / time.Duration(max(r.Ops, 1)) }

func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// PerSecond returns cycles per second.
func (r Result) PerSecond() float64 { return float64(r.Ops) / r.Elapsed.Seconds() }

// PerOp returns Redis commands per cycle, in the steady state when known.
func (r Result) PerOp() float64 {
	if r.MidOps > 0 {
		return float64(r.MidCommands) / float64(r.MidOps)
	}
	return float64(r.Commands) / float64(max(r.Ops, 1))
}

// Uncontended runs lock+unlock cycles from g goroutines, each on its own
// key, for d.
func Uncontended(ctx context.Context, l *Locker, g int, d time.Duration) Result {
	return drive(ctx, l, g, d, func(i int) string { return fmt.Sprintf("u%d", i) }, false, nil)
}

// Contended runs g goroutines that take one key, hold it for cs, and
// release it, for d. With spin the critical section is a busy loop of
// exactly cs; without, time.Sleep(cs), which oversleeps (by about 90 µs for
// 1 ms on the machine this was written on).
func Contended(ctx context.Context, l *Locker, g int, d, cs time.Duration, spin bool) Result {
	return drive(ctx, l, g, d, func(int) string { return "hot" }, true, critical(cs, spin))
}

// critical returns the critical section: hold for cs.
func critical(cs time.Duration, spin bool) func() {
	if cs <= 0 {
		return nil
	}
	if spin {
		return func() {
			for end := time.Now().Add(cs); time.Now().Before(end); {
			}
		}
	}
	return func() { time.Sleep(cs) }
}

func drive(ctx context.Context, l *Locker, g int, d time.Duration, key func(int) string, wait bool, cs func()) Result {
	return driveFrom(ctx, l, g, time.Now(), d, key, wait, cs)
}

// driveFrom runs g goroutines from start (it waits for it) for d.
func driveFrom(ctx context.Context, l *Locker, g int, start time.Time, d time.Duration, key func(int) string, wait bool, cs func()) Result {
	// Calls are never cancelled midway (a cancelled acquisition may still
	// take the lock in Redis): the goroutines stop at the deadline, and only
	// cycles completed before it count, as do the commands sent before it.
	var ops, errs atomic.Int64
	var wg sync.WaitGroup
	time.Sleep(time.Until(start))
	deadline := start.Add(d)
	cmds := l.Commands()
	var cmdsAtDeadline, opsQ1, cmdsQ1, opsQ3, cmdsQ3 atomic.Int64
	stop := time.AfterFunc(d, func() { cmdsAtDeadline.Store(l.Commands()) })
	defer stop.Stop()
	q1 := time.AfterFunc(d/4, func() { opsQ1.Store(ops.Load()); cmdsQ1.Store(l.Commands()) })
	defer q1.Stop()
	q3 := time.AfterFunc(3*d/4, func() { opsQ3.Store(ops.Load()); cmdsQ3.Store(l.Commands()) })
	defer q3.Stop()
	cpu := processCPU()
	for i := range g {
		k := key(i)
		wg.Go(func() {
			for time.Now().Before(deadline) && ctx.Err() == nil {
				unlock, err := l.Lock(ctx, k, wait)
				if err != nil {
					errs.Add(1)
					continue
				}
				if cs != nil {
					cs()
				}
				if err := unlock(ctx); err != nil {
					errs.Add(1)
					continue
				}
				if time.Now().Before(deadline) {
					ops.Add(1)
				}
			}
		})
	}
	wg.Wait()
	end := cmdsAtDeadline.Load()
	if end == 0 {
		end = l.Commands()
	}
	return Result{Ops: ops.Load(), Elapsed: d, Commands: end - cmds, Errors: errs.Load(), CPU: processCPU() - cpu,
		MidOps: opsQ3.Load() - opsQ1.Load(), MidCommands: cmdsQ3.Load() - cmdsQ1.Load()}
}

// Mutex runs the contended scenario on an in-process sync.Mutex: the best
// any lock can do with this critical section on this machine.
func Mutex(g int, d, cs time.Duration, spin bool) Result {
	section := critical(cs, spin)
	var mu sync.Mutex
	var ops atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(d)
	start := time.Now()
	for range g {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				mu.Lock()
				section()
				mu.Unlock()
				ops.Add(1)
			}
		})
	}
	wg.Wait()
	return Result{Ops: ops.Load(), Elapsed: time.Since(start)}
}

// Config of a full comparison.
type Config struct {
	Addr        string
	Prefix      string
	Goroutines  int           // 64
	Conns       int           // go-redis pool size
	Rounds      int           // rounds; the lockers take turns in each
	Uncontended time.Duration // per locker per round
	Contended   time.Duration // per locker per round and critical section kind
	Critical    time.Duration // critical section of the contended run
	Sections    []string      // kinds of critical section: "sleep", "spin"
	Lockers     []string

	// The contended run across processes: Procs processes of Exe (which
	// must run Child when given ChildArgs), ProcGoroutines goroutines each,
	// for Multi per locker per round and critical section kind.
	Procs          int
	ProcGoroutines int
	Multi          time.Duration
	Exe            string
}

// Report holds the results of Run, by locker name and round.
type Report struct {
	Config      Config
	Uncontended map[string][]Result
	Contended   map[string]map[string][]Result // by section kind, then locker
	Mutex       map[string][]Result            // by section kind
	Procs       map[string]map[string][]Result // across processes: by section kind, then locker
}

// Run measures every locker, alternating between them round by round so
// that a noisy machine hurts all of them alike.
func Run(ctx context.Context, cfg Config, progress io.Writer) (*Report, error) {
	rep := &Report{Config: cfg, Uncontended: map[string][]Result{},
		Contended: map[string]map[string][]Result{}, Mutex: map[string][]Result{},
		Procs: map[string]map[string][]Result{}}
	lockers := map[string]*Locker{}
	defer func() {
		for _, l := range lockers {
			l.Close()
		}
	}()
	for _, name := range cfg.Lockers {
		l, err := New(name, cfg.Addr, cfg.Prefix+name+":", cfg.Conns)
		if err != nil {
			return nil, err
		}
		lockers[name] = l
		// warm up: connections, scripts, subscriptions
		Uncontended(ctx, l, cfg.Goroutines, 200*time.Millisecond)
	}
	for round := range cfg.Rounds {
		if cfg.Uncontended > 0 {
			for _, name := range rotate(cfg.Lockers, round) {
				r := Uncontended(ctx, lockers[name], cfg.Goroutines, cfg.Uncontended)
				rep.Uncontended[name] = append(rep.Uncontended[name], r)
				fmt.Fprintf(progress, "round %d uncontended      %-13s %8.0f/s  %.2f cmds/op  %5.1fµs client CPU/op  %d errors\n",
					round+1, name, r.PerSecond(), r.PerOp(), float64(r.CPUPerOp())/1e3, r.Errors)
			}
		}
		for _, kind := range cfg.Sections {
			if cfg.Contended <= 0 {
				break
			}
			spin := kind == "spin"
			if rep.Contended[kind] == nil {
				rep.Contended[kind] = map[string][]Result{}
			}
			for _, name := range rotate(cfg.Lockers, round) {
				r := Contended(ctx, lockers[name], cfg.Goroutines, cfg.Contended, cfg.Critical, spin)
				rep.Contended[kind][name] = append(rep.Contended[kind][name], r)
				fmt.Fprintf(progress, "round %d contended/%-6s %-13s %8.0f/s  %.2f cmds/op  %d errors\n",
					round+1, kind, name, r.PerSecond(), r.PerOp(), r.Errors)
			}
			rep.Mutex[kind] = append(rep.Mutex[kind], Mutex(cfg.Goroutines, cfg.Contended, cfg.Critical, spin))
		}
		for _, kind := range cfg.Sections {
			if cfg.Procs <= 0 || cfg.Multi <= 0 {
				break
			}
			if rep.Procs[kind] == nil {
				rep.Procs[kind] = map[string][]Result{}
			}
			for _, name := range rotate(cfg.Lockers, round) {
				r, err := procs(ctx, cfg, name, kind == "spin")
				if err != nil {
					return rep, err
				}
				rep.Procs[kind][name] = append(rep.Procs[kind][name], r)
				fmt.Fprintf(progress, "round %d processes/%-6s %-13s %8.0f/s  %.2f cmds/op  %d errors\n",
					round+1, kind, name, r.PerSecond(), r.PerOp(), r.Errors)
			}
		}
		if err := ctx.Err(); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// ChildConfig is what one process of the contended run across processes
// does (see Child).
type ChildConfig struct {
	Locker, Addr, Prefix string
	Conns                int
	Goroutines           int
	Start                time.Time // when all processes begin, together
	Duration, Critical   time.Duration
	Spin                 bool
}

// Args returns the command-line arguments that make lockbench run cc.
func (cc ChildConfig) Args() []string {
	return []string{"-child", "-lockers", cc.Locker, "-addr", cc.Addr, "-prefix", cc.Prefix,
		"-conns", strconv.Itoa(cc.Conns), "-g", strconv.Itoa(cc.Goroutines),
		"-start", strconv.FormatInt(cc.Start.UnixNano(), 10), "-dc", cc.Duration.String(),
		"-cs", cc.Critical.String(), "-spin=" + strconv.FormatBool(cc.Spin)}
}

// Child is one process of the contended run across processes: it connects,
// warms up (connections, scripts, subscription), then from cc.Start runs
// cc.Goroutines goroutines that take the key every process takes, hold it
// for cc.Critical and release it, for cc.Duration.
func Child(ctx context.Context, cc ChildConfig) (Result, error) {
	l, err := New(cc.Locker, cc.Addr, cc.Prefix, cc.Conns)
	if err != nil {
		return Result{}, err
	}
	defer l.Close()
	warm := fmt.Sprintf("warm%d", os.Getpid())
	drive(ctx, l, 2, 100*time.Millisecond, func(int) string { return warm }, true, nil)
	if time.Until(cc.Start) <= 0 {
		return Result{}, fmt.Errorf("bench: child ready %v after the start", -time.Until(cc.Start))
	}
	return driveFrom(ctx, l, cc.Goroutines, cc.Start, cc.Duration, func(int) string { return "procs" }, true,
		critical(cc.Critical, cc.Spin)), nil
}

// procs runs the contended run across processes for one locker: cfg.Procs
// children, started together, and the sum of their results.
func procs(ctx context.Context, cfg Config, name string, spin bool) (Result, error) {
	cc := ChildConfig{Locker: name, Addr: cfg.Addr, Prefix: cfg.Prefix + name + ":", Conns: cfg.Conns,
		Goroutines: cfg.ProcGoroutines, Start: time.Now().Add(3 * time.Second),
		Duration: cfg.Multi, Critical: cfg.Critical, Spin: spin}
	outs := make([]bytes.Buffer, cfg.Procs)
	errs := make([]error, cfg.Procs)
	var wg sync.WaitGroup
	for i := range cfg.Procs {
		cmd := exec.CommandContext(ctx, cfg.Exe, cc.Args()...)
		cmd.Stdout, cmd.Stderr = &outs[i], os.Stderr
		wg.Go(func() { errs[i] = cmd.Run() })
	}
	wg.Wait()
	sum := Result{Elapsed: cfg.Multi}
	for i := range cfg.Procs {
		var r Result
		if err := errors.Join(errs[i], json.Unmarshal(outs[i].Bytes(), &r)); err != nil {
			return sum, fmt.Errorf("bench: process %d of %s: %w", i, name, err)
		}
		sum.Ops += r.Ops
		sum.Commands += r.Commands
		sum.MidOps += r.MidOps
		sum.MidCommands += r.MidCommands
		sum.Errors += r.Errors
		sum.CPU += r.CPU
	}
	return sum, nil
}

// rotate starts the order at a different locker in each round.
func rotate(names []string, round int) []string {
	n := len(names)
	out := make([]string, 0, n)
	for i := range n {
		out = append(out, names[(i+round)%n])
	}
	return out
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// ratio returns the median over rounds of a's rate divided by b's rate in
// the same round.
func ratio(a, b []Result) float64 {
	var rs []float64
	for i := range min(len(a), len(b)) {
		rs = append(rs, a[i].PerSecond()/b[i].PerSecond())
	}
	return median(rs)
}

func rates(rs []Result) (perSec, perOp float64, errs int64) {
	var ps, po []float64
	for _, r := range rs {
		ps = append(ps, r.PerSecond())
		po = append(po, r.PerOp())
		errs += r.Errors
	}
	return median(ps), median(po), errs
}

// Print writes the comparison tables.
func (rep *Report) Print(w io.Writer) {
	cfg := rep.Config
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	if len(rep.Uncontended) > 0 {
		fmt.Fprintf(w, "\nUncontended lock+unlock cycle: %d goroutines, distinct keys; median of %d rounds of %v\n", cfg.Goroutines, cfg.Rounds, cfg.Uncontended)
		fmt.Fprintln(tw, "locker\tcycles/s\tx redsync\tx redislock\tcmds/cycle\tclient CPU/cycle\terrors\t")
		for _, name := range cfg.Lockers {
			ps, po, errs := rates(rep.Uncontended[name])
			var cpu []float64
			for _, r := range rep.Uncontended[name] {
				cpu = append(cpu, float64(r.CPUPerOp())/1e3)
			}
			fmt.Fprintf(tw, "%s\t%.0f\t%s\t%s\t%.2f\t%.1fµs\t%d\t\n", name, ps,
				ratioCell(rep.Uncontended, name, Redsync), ratioCell(rep.Uncontended, name, Redislock), po, median(cpu), errs)
		}
		tw.Flush()
	}
	for _, kind := range cfg.Sections {
		res := rep.Contended[kind]
		if len(res) == 0 {
			continue
		}
		mps, _, _ := rates(rep.Mutex[kind])
		how := "time.Sleep"
		if kind == "spin" {
			how = "busy loop"
		}
		ideal := float64(time.Second) / float64(cfg.Critical)
		fmt.Fprintf(w, "\nContended: %d goroutines, one key, %v critical section (%s); median of %d rounds of %v\n", cfg.Goroutines, cfg.Critical, how, cfg.Rounds, cfg.Contended)
		fmt.Fprintf(w, "ideal %.0f/s; an in-process sync.Mutex with the same critical section: %.0f/s\n", ideal, mps)
		fmt.Fprintln(tw, "locker\tacquisitions/s\t% of ideal\t% of sync.Mutex\tcmds/acquisition\terrors\t")
		for _, name := range cfg.Lockers {
			ps, po, errs := rates(res[name])
			fmt.Fprintf(tw, "%s\t%.0f\t%.1f%%\t%.1f%%\t%.2f\t%d\t\n", name, ps, 100*ps/ideal, 100*ps/mps, po, errs)
		}
		tw.Flush()
	}
	rep.printProcs(w)
}

// printProcs writes the table of the contended run across processes.
func (rep *Report) printProcs(w io.Writer) {
	cfg := rep.Config
	ideal := float64(time.Second) / float64(cfg.Critical)
	for _, kind := range cfg.Sections {
		res := rep.Procs[kind]
		if len(res) == 0 {
			continue
		}
		how := "time.Sleep"
		if kind == "spin" {
			how = "busy loop"
		}
		fmt.Fprintf(w, "\nContended across processes: %d processes x %d goroutines, one key, %v critical section (%s); median of %d rounds of %v\n",
			cfg.Procs, cfg.ProcGoroutines, cfg.Critical, how, cfg.Rounds, cfg.Multi)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "locker\tacquisitions/s\t% of ideal\tx redsync\tx redislock\tcmds/acquisition\terrors\t")
		for _, name := range cfg.Lockers {
			ps, po, errs := rates(res[name])
			fmt.Fprintf(tw, "%s\t%.0f\t%.1f%%\t%s\t%s\t%.2f\t%d\t\n", name, ps, 100*ps/ideal,
				ratioCell(res, name, Redsync), ratioCell(res, name, Redislock), po, errs)
		}
		tw.Flush()
	}
}

func ratioCell(m map[string][]Result, a, b string) string {
	if len(m[a]) == 0 || len(m[b]) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", ratio(m[a], m[b]))
}
