package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/auth"
	"github.com/seckilldev/seckill/check"
	"github.com/seckilldev/seckill/loadgen"
	"github.com/seckilldev/seckill/stock"
)

type benchConfig struct {
	target      string
	activity    int64
	adminToken  string
	redisURL    string
	dbURL       string
	prefix      string
	users       int
	concurrency int
	requests    int64
	duration    time.Duration
	repeat      float64
	stock       int64
	buckets     int
	crowdSkew   float64
	queue       benchQueue
	baseline    bool
	compare     bool
	noWorker    bool
	selfHosted  bool // the service is this bench's child (set by runBench)
	jsonOut     bool
	// generator is the load generator of --baseline: auto, wrk or go;
	// benchCmd resolves auto to one of the other two.
	generator string
	cmp       compareFlags
	drain     drainFlags
	// identity is how the crowd names its buyers: header or jwt (tokens
	// minted with jwtSecret, aud jwtAudience, iss jwtIssuer).
	identity    string
	jwtSecret   string
	jwtAudience string
	jwtIssuer   string
	jwtClaim    string
}

func benchCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c benchConfig
	fs := newFlagSet("bench", stderr)
	fs.StringVar(&c.target, "target", "", "base URL of a running service (default: start one, as a child process, on --redis and --db)")
	fs.Int64Var(&c.activity, "activity", 0, "with --target: the activity to grab (default: create one with --admin-token)")
	fs.StringVar(&c.adminToken, "admin-token", "", "with --target: the service's admin token, to create the sale")
	fs.StringVar(&c.redisURL, "redis", "", "Redis URL of the service, see Redis URLs below: to verify, and to self-host on (default when self-hosting: embedded, which says little about production)")
	fs.StringVar(&c.dbURL, "db", "", "database URL of the service, see Database URLs below: to verify, and to self-host on (default when self-hosting: a temporary SQLite file)")
	fs.StringVar(&c.prefix, "redis-prefix", stock.DefaultPrefix, "with --target: the service's Redis key namespace")
	fs.IntVar(&c.users, "users", 50000, "distinct users in the crowd")
	fs.IntVar(&c.concurrency, "concurrency", 64, "connections (with --baseline and wrk: wrk -c)")
	fs.Int64Var(&c.requests, "requests", 0, "requests to send (default: every user once, plus the repeated clicks; not with --baseline and wrk, which runs for --duration)")
	fs.DurationVar(&c.duration, "duration", time.Minute, "bound on the time spent sending (with --baseline and wrk: the length of each run, in whole seconds; default 8s)")
	fs.Float64Var(&c.repeat, "repeat", 0.2, "share of requests that are a user clicking again, in [0, 0.95]")
	fs.Int64Var(&c.stock, "stock", 1000, "units on sale")
	fs.IntVar(&c.buckets, "buckets", 1, "buckets the sales the bench creates split their stock into in Redis (see buckets in POST /api/v1/activities: one sale over several Redis Cluster masters)")
	fs.Float64Var(&c.crowdSkew, "crowd-skew", 0, "with --buckets above 2: the share of the crowd's users homed in two of the buckets, in [0, 1) (0: users 1, 2, 3, ..., spread over every bucket); the others are homed in the rest")
	fs.BoolVar(&c.baseline, "baseline", false, "measure against a trivial handler in a separate process, in two scenarios (every grab succeeds; after the sell-out), and print ratios; with wrk, 2 baseline runs alternate with 2 grab runs per scenario (medians)")
	fs.StringVar(&c.generator, "generator", generatorAuto, "with --baseline: the load generator, auto (wrk if on PATH, else go), wrk (a C generator, cheap enough not to skew the ratios; apt-get install wrk) or go (built in; shares the CPUs at a cost close to the service's, so its ratios run higher)")
	fs.BoolVar(&c.compare, "compare", false, "compare grab strategies (database alone, global lock, per-activity lock, per-user lock, no lock, Lua)")
	fs.BoolVar(&c.noWorker, "no-worker", false, "when self-hosting: run the service without the order worker (measures the grab path alone)")
	fs.BoolVar(&c.jsonOut, "json", false, "print the results as JSON")
	fs.StringVar(&c.identity, "identity", "header", "how the crowd names its buyers: header (X-User-ID) or jwt (bearer JWTs minted with --jwt-secret; when self-hosting, a secret of its own)")
	fs.StringVar(&c.jwtSecret, "jwt-secret", "", "with --identity jwt and --target: the service's HS256 secret, to mint tokens")
	fs.StringVar(&c.jwtAudience, "jwt-audience", "", "with --identity jwt and --target: the aud of the minted tokens")
	fs.StringVar(&c.jwtIssuer, "jwt-issuer", "", "with --identity jwt and --target: the iss of the minted tokens")
	fs.StringVar(&c.jwtClaim, "jwt-user-claim", "sub", "with --identity jwt and --target: the claim that holds the user id")
	c.queue.register(fs)
	c.cmp.register(fs)
	c.drain.register(fs)
	if err := fs.parse(args); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case c.users < 1 || c.users > 50_000_000:
		return usagef("--users: %d is not between 1 and 50000000", c.users)
	case c.concurrency < 1 || c.concurrency > 10000:
		return usagef("--concurrency: %d is not between 1 and 10000", c.concurrency)
	case c.requests < 0:
		return usagef("--requests: %d is negative", c.requests)
	case c.duration <= 0 || c.duration > 24*time.Hour:
		return usagef("--duration: %v is not between 0 and 24h", c.duration)
	case c.repeat < 0 || c.repeat > 0.95:
		return usagef("--repeat: %v is not between 0 and 0.95", c.repeat)
	case c.stock < 1 || c.stock > 100_000_000:
		return usagef("--stock: %d is not between 1 and 100000000", c.stock)
	case c.buckets < 1 || c.buckets > seckill.MaxBuckets:
		return usagef("--buckets: %d is not between 1 and %d", c.buckets, seckill.MaxBuckets)
	case !(c.crowdSkew >= 0 && c.crowdSkew < 1):
		return usagef("--crowd-skew: %v is not in [0, 1)", c.crowdSkew)
	case c.crowdSkew > 0 && (c.buckets < 3 || c.activity != 0):
		return usagef("--crowd-skew homes the crowd in two of the buckets of the sale the bench creates: it needs --buckets 3 or more, and no --activity")
	case c.crowdSkew > 0 && (c.baseline || c.compare):
		return usagef("--crowd-skew shapes the crowd of one sale: not with --baseline or --compare")
	case c.target != "" && c.activity == 0 && c.adminToken == "":
		return usagef("--target needs --activity or --admin-token")
	case c.baseline && c.compare:
		return usagef("--baseline and --compare are separate runs")
	case c.identity != "header" && c.identity != "jwt":
		return usagef("--identity: %q is not one of header, jwt", c.identity)
	case c.identity == "jwt" && (c.baseline || c.compare):
		return usagef("--identity jwt measures the service itself: not with --baseline or --compare")
	case c.identity == "jwt" && c.target != "" && len(c.jwtSecret) < auth.MinSecretLen:
		return usagef("--identity jwt with --target needs --jwt-secret, the service's secret (at least %d bytes)", auth.MinSecretLen)
	case c.cmp.results != "" && !c.compare:
		return usagef("--results saves the results of --compare")
	case c.generator != generatorAuto && c.generator != generatorWrk && c.generator != generatorGo:
		return usagef("--generator: %q is not one of auto, wrk, go", c.generator)
	case set["generator"] && !c.baseline:
		return usagef("--generator chooses the load generator of --baseline")
	}
	if err := c.queue.check(c, set); err != nil {
		return err
	}
	// The URLs, before anything starts: the embedded Redis of --drain, the
	// child service, or a run on --target that would verify on them only
	// at its end.
	if err := checkURLs(c.redisURL, c.dbURL); err != nil {
		return err
	}
	if err := checkTarget(c.target); err != nil {
		return err
	}
	if c.compare && c.redisURL != "" && !strings.HasPrefix(c.redisURL, "redis://") && !strings.HasPrefix(c.redisURL, "rediss://") {
		return usagef("--redis: --compare runs on one Redis server: redis:// or rediss://, not a Cluster or Sentinel")
	}
	if c.baseline {
		if err := c.pickGenerator(set); err != nil {
			return err
		}
	}
	if err := c.drain.check(c, set); err != nil {
		return err
	}
	if c.drain.on {
		return runDrain(ctx, c, stdout, stderr)
	}
	if c.compare {
		if c.target != "" {
			return usagef("--compare serves each strategy itself: it takes --redis and --db, not --target")
		}
		return runCompare(ctx, c, set, stdout, stderr)
	}
	return runBench(ctx, c, stdout, stderr)
}

// checkTarget refuses a --target that is not an http(s) URL of a host
// ("": none).
func checkTarget(target string) error {
	if target == "" {
		return nil
	}
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usagef("--target: %q is not a base URL such as http://127.0.0.1:8080", redactURL(target))
	}
	return nil
}

// benchResult is what `seckill bench --json` prints.
type benchResult struct {
	Load      *loadgen.Report `json:"load,omitempty"`
	Checks    *check.Report   `json:"checks,omitempty"`
	Scenarios []scenario      `json:"scenarios,omitempty"`
	// Room is what the service said of its waiting room, a second at a
	// time, in a run with --queue-rate (when its /metrics could be read).
	Room *roomSeries `json:"room,omitempty"`
	// ScriptCalls is, on a Redis Cluster, each master's script calls
	// during the crowd.
	ScriptCalls []stock.NodeCalls `json:"script_calls_per_master,omitempty"`
	// Generator is the load generator of the scenarios: wrk or go.
	Generator string `json:"generator,omitempty"`
	OK        bool   `json:"ok"`
}

type scenario struct {
	Name     string          `json:"name"`
	Grab     *loadgen.Report `json:"grab"`
	Baseline *loadgen.Report `json:"baseline"`
	Ratio    float64         `json:"ratio"`
	Target   float64         `json:"target_ratio"`
	// GrabRuns and BaselineRuns are the rates of each wrk run (req/s),
	// whose medians Grab and Baseline report.
	GrabRuns     []float64 `json:"grab_runs_per_sec,omitempty"`
	BaselineRuns []float64 `json:"baseline_runs_per_sec,omitempty"`
}

func runBench(ctx context.Context, c benchConfig, stdout, stderr io.Writer) error {
	say := func(format string, args ...any) { fmt.Fprintf(stderr, format+"\n", args...) }
	if c.target == "" {
		svc, err := startChildService(ctx, &c, stderr)
		if err != nil {
			return notStarted(err)
		}
		defer svc.stop()
		c.selfHosted = true
	} else if err := probeTarget(ctx, c); err != nil {
		return err
	}
	if c.baseline {
		return runBaseline(ctx, c, stdout, stderr)
	}
	startsAt := time.Now().Add(time.Second + c.queue.early)
	if c.activity == 0 {
		id, err := createSale(ctx, c.target, c.adminToken, c.stock, startsAt, 0, c.buckets, c.queue.room())
		if err != nil {
			return notStarted(err)
		}
		c.activity = id
		say("created activity %d with %d units, starting in %s", id, c.stock, time.Until(startsAt).Round(time.Second))
	}
	cfg := loadgen.Config{URL: c.target, ActivityID: c.activity, Users: c.users, Concurrency: c.concurrency,
		Requests: c.requests, Duration: c.duration, RepeatShare: c.repeat, WatchRemaining: true,
		Progress: loadgen.ProgressWriter(stderr), StartAt: startsAt}
	if c.queue.rate > 0 {
		cfg.Queue = &loadgen.Queue{JoinRate: c.queue.joinRate, Early: c.queue.early}
		cfg.RepeatShare = 0
	}
	if c.identity == "jwt" {
		cfg.Token = jwtBuyers(c.jwtSecret, c.jwtAudience, c.jwtIssuer, c.jwtClaim).token()
	}
	if c.crowdSkew > 0 {
		cfg.UserIDs, cfg.Users = skewedCrowd(c.users, c.buckets, c.crowdSkew, uint64(time.Now().UnixNano())), 0
	}
	var stopWatch func() *roomSeries
	if cfg.Queue != nil && c.adminToken != "" {
		stopWatch = watchRoom(ctx, c.target, c.adminToken, c.activity, startsAt.Add(-c.queue.early))
	}
	// On a Cluster, each master's share of the run's script calls: a sale
	// of buckets spreads over the masters.
	var cluster *redis.ClusterClient
	var callsBefore []stock.NodeCalls
	if c.redisURL != "" {
		rdb, err := stock.Dial(ctx, c.redisURL)
		if err != nil {
			return fmt.Errorf("--redis: %w", err)
		}
		defer rdb.Close()
		if cluster, _ = rdb.(*redis.ClusterClient); cluster != nil {
			if callsBefore, err = stock.ScriptCalls(ctx, cluster); err != nil {
				say("cannot read the masters' script calls: %v", err)
			}
		}
	}
	rep, err := loadgen.Run(ctx, cfg)
	if err != nil {
		return err
	}
	res := benchResult{Load: rep, OK: rep.UsersConflicting == 0}
	if callsBefore != nil {
		if after, err := stock.ScriptCalls(ctx, cluster); err != nil {
			say("cannot read the masters' script calls: %v", err)
		} else {
			res.ScriptCalls = callsDuring(callsBefore, after)
		}
	}
	if stopWatch != nil {
		res.Room = stopWatch()
	}
	// A run the service refused outright (a wrong JWT secret: every grab
	// 401) sold nothing, and its invariants hold trivially: not a pass.
	n := rep.Counts
	refused := n.Other + n.NotFound + n.Invalid
	if refused > 0 {
		say("%d of %d requests were refused rather than answered as grabs: %v", refused, n.Total(), rep.Samples)
	}
	sold := n.Accepted+n.Already > 0
	if c.dbURL != "" {
		checks, err := verify(ctx, c, rep, stderr)
		if err != nil {
			return err
		}
		res.Checks, res.OK = checks, res.OK && checks.OK()
	} else {
		say("pass --db (and --redis) to verify the invariants against the database")
	}
	if c.jsonOut {
		if err := writeJSON(stdout, res); err != nil {
			return err
		}
	} else {
		_ = rep.WriteTable(stdout)
		if res.ScriptCalls != nil {
			writeMasterCalls(stdout, res.ScriptCalls)
		}
		if rep.Queue != nil {
			_ = rep.Queue.WriteTable(stdout)
			c.queue.writeVerdict(stdout, rep, res.Room)
		}
		if res.Checks != nil {
			fmt.Fprintln(stdout)
			_ = res.Checks.WriteTable(stdout)
		}
	}
	switch {
	case !res.OK:
		return fmt.Errorf("invariants violated")
	case !sold && refused > 0:
		return fmt.Errorf("no grab was accepted: the service refused the requests (%d of %d), see above", refused, n.Total())
	}
	return nil
}

// probeTarget checks, before a run on --target, that the service answers
// HTTP (any status will do) and that --redis and --db, on which the run
// is verified at its end, answer too. Its error is a startError.
func probeTarget(ctx context.Context, c benchConfig) error {
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(pctx, "GET", strings.TrimRight(c.target, "/")+"/healthz", nil)
	if err != nil {
		return usagef("--target: %v", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return notStarted(fmt.Errorf("--target: the service does not answer: %w", err))
	}
	resp.Body.Close()
	if c.dbURL == "" {
		return nil // no verification: --redis is not used
	}
	return probe(ctx, c.redisURL, c.dbURL)
}

// verify waits for the worker to drain, then checks the invariants.
func verify(ctx context.Context, c benchConfig, rep *loadgen.Report, stderr io.Writer) (*check.Report, error) {
	cfg := check.Config{ActivityID: c.activity, Prefix: c.prefix,
		Answers: &check.Answers{ByUser: rep.OrdersByUser(), Uncertain: rep.UncertainUsers()}}
	if c.redisURL != "" {
		rdb, err := stock.Dial(ctx, c.redisURL)
		if err != nil {
			return nil, fmt.Errorf("--redis: %w", err)
		}
		defer rdb.Close()
		fmt.Fprintln(stderr, "waiting for the order worker to drain...")
		if err := check.WaitDrained(ctx, rdb, c.prefix, c.activity, 5*time.Minute); err != nil {
			fmt.Fprintf(stderr, "not drained: %v\n", err)
		}
		cfg.Redis = rdb
	}
	db, err := check.Open(ctx, c.dbURL)
	if err != nil {
		return nil, fmt.Errorf("--db: %w", err)
	}
	defer db.Close()
	cfg.DB = db
	return check.Run(ctx, cfg)
}

// The goals of the two scenarios (issue 13), as ratios to the bare handler
// measured with wrk: the API tier alone, 2 cores shared with Redis and the
// generator; and, for the first, the service with its worker, the database
// on the same cores too. The table prints them next to what was measured.
const (
	targetSucceeds       = 0.70
	targetSucceedsWorker = 0.45
	targetSoldOut        = 0.90
)

// succeedsTarget is the goal of "every grab succeeds" for the service
// measured: with its worker if self-hosted with one (a --target's is not
// known: the API tier's goal).
func succeedsTarget(c benchConfig) float64 {
	if c.selfHosted && !c.noWorker {
		return targetSucceedsWorker
	}
	return targetSucceeds
}

// runBaseline measures two scenarios against a trivial handler in a process
// of its own, with the same generator settings, and prints the ratios.
func runBaseline(ctx context.Context, c benchConfig, stdout, stderr io.Writer) error {
	say := func(format string, args ...any) { fmt.Fprintf(stderr, format+"\n", args...) }
	args := []string{"baseline-server"}
	if c.generator == generatorWrk {
		args = append(args, "--bare")
	}
	base, stopBase, err := startChild(ctx, stderr, nil, args...)
	if err != nil {
		return notStarted(err)
	}
	defer stopBase()
	if c.generator == generatorWrk {
		return runBaselineWrk(ctx, c, base, stdout, stderr)
	}
	fmt.Fprintln(stderr, goGeneratorWarning)
	requests := c.requests
	if requests == 0 {
		requests = 200_000
	}
	common := loadgen.Config{Concurrency: c.concurrency, Requests: requests, Duration: c.duration}

	var out []scenario
	// 1. Every grab succeeds: a stock nobody can exhaust, every user new.
	id, err := createSale(ctx, c.target, c.adminToken, 100_000_000, time.Now().Add(500*time.Millisecond), 0, c.buckets, "")
	if err != nil {
		return err
	}
	time.Sleep(600 * time.Millisecond)
	cfg := common
	cfg.ActivityID, cfg.Users, cfg.FirstUserID = id, int(min(requests, 50_000_000)), 1
	s, err := measurePair(ctx, "every grab succeeds", succeedsTarget(c), cfg, c.target, base, say)
	if err != nil {
		return err
	}
	out = append(out, s)

	// 2. After the sell-out: the common case of a real sale.
	id, err = createSale(ctx, c.target, c.adminToken, 1, time.Now().Add(500*time.Millisecond), 0, c.buckets, "")
	if err != nil {
		return err
	}
	time.Sleep(600 * time.Millisecond)
	cfg = common
	cfg.ActivityID, cfg.Users, cfg.RepeatShare = id, c.users, c.repeat
	if cfg.Requests == 0 {
		cfg.Requests = requests
	}
	s, err = measurePair(ctx, "after the sell-out", targetSoldOut, cfg, c.target, base, say)
	if err != nil {
		return err
	}
	out = append(out, s)

	if c.jsonOut {
		return writeJSON(stdout, benchResult{Scenarios: out, Generator: generatorGo, OK: true})
	}
	writeBaselineTable(stdout, out)
	fmt.Fprintf(stdout, "\n%d connections, %d requests per run; generator, service, Redis and baseline share this machine (%d CPUs)\n",
		c.concurrency, requests, numCPU())
	fmt.Fprintln(stdout, "generator: go, in this process; it costs about as much CPU per request as the service, so these ratios run higher than wrk's (apt-get install wrk)")
	return nil
}

func writeBaselineTable(w io.Writer, out []scenario) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "SCENARIO\tGRAB req/s\tBASELINE req/s\tRATIO\tTARGET\tGRAB p50\tp99\tBASELINE p99\n")
	for _, s := range out {
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.2f\t>= %.2f\t%s\t%s\t%s\n", s.Name, s.Grab.Throughput, s.Baseline.Throughput,
			s.Ratio, s.Target, s.Grab.Latency.P50.Round(time.Microsecond), s.Grab.Latency.P99.Round(time.Microsecond),
			s.Baseline.Latency.P99.Round(time.Microsecond))
	}
	_ = tw.Flush()
}

// measurePair runs the baseline, then the grab, with the same settings.
func measurePair(ctx context.Context, name string, target float64, cfg loadgen.Config, grabURL, baseURL string, say func(string, ...any)) (scenario, error) {
	say("%s: baseline...", name)
	b, err := loadgen.MeasureBaseline(ctx, cfg, baseURL)
	if err != nil {
		return scenario{}, err
	}
	say("%s: grab...", name)
	cfg.URL = grabURL
	g, err := loadgen.Run(ctx, cfg)
	if err != nil {
		return scenario{}, err
	}
	if failed := g.Counts.Other + g.Counts.Errors + g.Counts.Timeouts + g.Counts.Unavailable + g.Counts.Unknown; failed > 0 {
		say("%s: %d requests failed: %v", name, failed, g.Samples)
	}
	return scenario{Name: name, Grab: g, Baseline: b, Ratio: loadgen.Ratio(g, b), Target: target}, nil
}

// childService is a `seckill serve` started by the bench.
type childService struct{ stop func() }

// startChildService runs `seckill serve` in a child process on c's backends
// and points c at it.
func startChildService(ctx context.Context, c *benchConfig, stderr io.Writer) (*childService, error) {
	if c.redisURL == "" {
		fmt.Fprintln(stderr, "warning: no --redis: the service runs on the embedded Redis, which is built for demos, not speed")
	}
	var cleanup []func()
	if c.dbURL == "" {
		dir, err := os.MkdirTemp("", "seckill-bench")
		if err != nil {
			return nil, err
		}
		cleanup = append(cleanup, func() { os.RemoveAll(dir) })
		c.dbURL = "sqlite://" + filepath.Join(dir, "bench.db")
	}
	c.adminToken = "bench-" + randomHex(16)
	c.prefix = "bench" + randomHex(4)
	args := []string{"serve", "--listen", "127.0.0.1:0", "--admin-token", c.adminToken, "--db", c.dbURL,
		"--redis-prefix", c.prefix, "--log-level", "warn"}
	if c.redisURL != "" {
		args = append(args, "--redis", c.redisURL)
	}
	if c.noWorker {
		args = append(args, "--no-worker")
	}
	var env []string
	if c.identity == "jwt" {
		// A secret of its own, passed in the environment (not on a
		// command line that ps shows), with the default claims.
		c.jwtSecret, c.jwtAudience, c.jwtIssuer, c.jwtClaim = randomHex(32), "", "", "sub"
		args = append(args, "--identity", "jwt")
		env = append(env, envName("jwt-secret")+"="+c.jwtSecret)
	}
	url, stop, err := startChild(ctx, stderr, env, args...)
	if err != nil {
		for _, f := range cleanup {
			f()
		}
		return nil, err
	}
	c.target = url
	return &childService{stop: func() {
		stop()
		for _, f := range cleanup {
			f()
		}
	}}, nil
}

// selfBinary returns this executable, to run as a child seckill process;
// a Go test binary is refused (run as "serve", it would run the tests).
func selfBinary() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	if strings.HasSuffix(filepath.Base(exe), ".test") {
		return "", fmt.Errorf("%s is a test binary: it cannot run as a seckill child process; build seckill and run that", filepath.Base(exe))
	}
	return exe, nil
}

// startChild runs this executable with args, and env added to the
// environment, and waits for the line "listening on <addr>" on its stdout.
// stop sends SIGTERM and waits.
func startChild(ctx context.Context, stderr io.Writer, env []string, args ...string) (url string, stop func(), err error) {
	exe, err := selfBinary()
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(exe, args...)
	// How the child identifies buyers is the bench's choice alone, not
	// the environment's.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SECKILL_JWT_") && !strings.HasPrefix(kv, "SECKILL_IDENTITY=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("start %s: %w", args[0], err)
	}
	stop = func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	addr := make(chan string, 1)
	exited := make(chan struct{}) // its stdout closed: it exited
	go func() {
		defer close(exited)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "listening on "); ok {
				select {
				case addr <- a:
				default:
				}
			}
		}
	}()
	why := "in 30s"
	select {
	case a := <-addr:
		return "http://" + a, stop, nil
	case <-exited:
		// A child that could not start says why on stderr, which is
		// ours: no need to wait 30 s to say it did not start.
		stop()
		why = "(" + cmd.ProcessState.String() + "; its error is above)"
	case <-time.After(30 * time.Second):
		stop()
	case <-ctx.Done():
		stop()
		why = "(stopped)"
	}
	return "", nil, fmt.Errorf("%s did not start %s", args[0], why)
}

// baselineServerCmd is the trivial handler the bench measures against,
// in a process of its own (hidden command).
func baselineServerCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("baseline-server", stderr)
	listen := fs.String("listen", "127.0.0.1:0", "address to listen on")
	bare := fs.Bool("bare", false, "serve GET /hello with \"ok\" from a server with no settings: the bare Go handler of ../shared/perf/wrk-grab.sh")
	if err := fs.parse(args); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return usagef("--listen: %v", err)
	}
	fmt.Fprintf(stdout, "listening on %s\n", ln.Addr())
	if *bare {
		mux := http.NewServeMux()
		mux.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) })
		srv := &http.Server{Handler: mux} // the yardstick: no timeouts, as in the reference
		go func() { <-ctx.Done(); _ = srv.Close() }()
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}
	return loadgen.ServeBaseline(ctx, ln)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
func numCPU() int { return runtime.NumCPU() }
