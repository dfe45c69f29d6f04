package faults_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill/check"
	"github.com/seckilldev/seckill/faults/internal/cluster"
	"github.com/seckilldev/seckill/internal/testenv"
)

// binDir holds the binaries built for this test run.
var binDir = sync.OnceValues(func() (string, error) { return os.MkdirTemp("", "seckill-faults") })

// quiet drops go-redis' own messages (dial failures while a test has
// Redis down); the errors that matter reach the callers anyway.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quiet{})
	code := m.Run()
	if dir, err := binDir(); err == nil {
		os.RemoveAll(dir)
	}
	os.Exit(code)
}

// build compiles a main package of this module into the run's bin dir.
func build(pkg, name string) (string, error) {
	dir, err := binDir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, name)
	out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin, nil
}

// seckillBinary is cmd/seckill, built once per test run, or the binary
// SECKILL_FAULTS_BIN names.
var seckillBinary = sync.OnceValues(func() (string, error) {
	if b := os.Getenv("SECKILL_FAULTS_BIN"); b != "" {
		return b, nil
	}
	return build("github.com/seckilldev/seckill/cmd/seckill", "seckill")
})

func binary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs processes")
	}
	bin, err := seckillBinary()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// env is one deployment under test: API instances and workers as
// processes, a fresh PostgreSQL database, Redis, an activity on sale.
type env struct {
	t        *testing.T
	ctx      context.Context
	c        *cluster.Cluster
	chk      *cluster.Checker
	prefix   string
	activity int64
	stock    int64
	faults   cluster.Counter
	began    time.Time
}

type envOptions struct {
	apis, workers int
	stock         int64
	// buckets splits the sale's stock in Redis (0: one bucket).
	buckets int
	// redis is a redis-server of the test's own; nil: the shared Redis.
	redis *testenv.RedisServer
	// redisURL, if set, is the Redis of the processes and the checker
	// instead: a redis+cluster:// or redis+sentinel:// URL.
	redisURL string
	// apiArgs are more flags of the API instances.
	apiArgs []string
	// procRedis and procDB, if set, are the addresses (host:port) through
	// which the processes reach Redis and PostgreSQL: a proxy.
	procRedis, procDB func(direct string) string
	// workerRedis, if set, is the address through which the workers alone
	// reach Redis.
	workerRedis func(direct string) string
	// dbURL, if set, is the database to use instead of a fresh one.
	dbURL string
	// dbParams, if set, are added to the query of the processes' database
	// URL (server parameters).
	dbParams url.Values
}

func newEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	bin := binary(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	redisAddr := ""
	if o.redis != nil {
		redisAddr = o.redis.Addr
	} else {
		redisAddr = testenv.RedisAddr(t)
	}
	dbURL := o.dbURL
	if dbURL == "" {
		dbURL = testenv.PostgresURL(t)
	}
	procRedis, procDB := "redis://"+redisAddr, dbURL
	checkRedis := procRedis
	if o.redisURL != "" {
		procRedis, checkRedis = o.redisURL, o.redisURL
	}
	if o.procRedis != nil {
		procRedis = "redis://" + o.procRedis(redisAddr)
	}
	if o.procDB != nil || o.dbParams != nil {
		u, err := url.Parse(dbURL)
		if err != nil {
			t.Fatal(err)
		}
		if o.procDB != nil {
			u.Host = o.procDB(u.Host)
		}
		q := u.Query()
		for k, v := range o.dbParams {
			q[k] = v
		}
		u.RawQuery = q.Encode()
		procDB = u.String()
	}
	workerRedis := ""
	if o.workerRedis != nil {
		workerRedis = "redis://" + o.workerRedis(redisAddr)
	}
	e := &env{t: t, ctx: ctx, prefix: testenv.Prefix(t), stock: o.stock, began: time.Now()}
	c, err := cluster.New(cluster.Config{
		Binary: bin, RedisURL: procRedis, WorkerRedisURL: workerRedis, DBURL: procDB, Prefix: e.prefix,
		ClaimIdle: time.Second, Batch: 20, APIArgs: o.apiArgs,
		Log: func(name, line string) { t.Logf("%7.3fs %s: %s", time.Since(e.began).Seconds(), name, line) },
	})
	if err != nil {
		t.Fatal(err)
	}
	e.c = c
	t.Cleanup(c.Kill) // runs before the database is dropped
	for range o.apis {
		if _, err := c.StartAPI(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for range o.workers {
		if _, err := c.StartWorker(""); err != nil {
			t.Fatal(err)
		}
	}
	if e.chk, err = cluster.OpenChecker(ctx, checkRedis, dbURL, e.prefix); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.chk.Close() })
	if e.activity, err = c.CreateActivity(ctx, t.Name(), o.stock, time.Hour, o.buckets); err != nil {
		t.Fatal(err)
	}
	return e
}

// logf logs with the time since the deployment started.
func (e *env) logf(format string, args ...any) {
	e.t.Helper()
	e.t.Logf("%7.3fs %s", time.Since(e.began).Seconds(), fmt.Sprintf(format, args...))
}

// fault counts and logs a fault injected.
func (e *env) fault(kind, format string, args ...any) {
	e.t.Helper()
	e.faults.Add(kind)
	e.logf("FAULT %s: %s", kind, fmt.Sprintf(format, args...))
}

// crowd returns the test suites' usual crowd: a few thousand grabs over
// every API instance, spread over several seconds so that faults land in
// the middle of the sale.
func (e *env) crowd(users int, requests int64, rate float64) cluster.Crowd {
	return cluster.Crowd{URLs: e.c.URLs(), ActivityID: e.activity, Users: users, Requests: requests,
		RepeatShare: 0.2, Concurrency: 16, Rate: rate, Timeout: 5 * time.Second}
}

// outcome is a finished run: what the crowd saw and what the checker found.
type outcome struct {
	crowd  *cluster.CrowdResult
	report *check.Report
}

// run sends the crowd while inject breaks things, then lets the
// deployment recover (stopped processes continued, dead ones restarted),
// waits for the drain, stops every process with SIGTERM (each must exit
// 0), runs the checker and logs the tables.
func (e *env) run(cr cluster.Crowd, inject func(ctx context.Context, p *cluster.CrowdProgress)) outcome {
	e.t.Helper()
	sampler := e.chk.Sample(e.activity, 20*time.Millisecond)
	defer sampler.Stop() // on every path; Stop twice is harmless
	progress := &cluster.CrowdProgress{}
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	injected := make(chan struct{})
	crowdDone := make(chan struct{})
	go func() {
		defer close(injected)
		if inject != nil {
			inject(ctx, progress)
		}
	}()
	var res *cluster.CrowdResult
	var crowdErr error
	go func() {
		defer close(crowdDone)
		res, crowdErr = cr.Run(ctx, progress)
	}()
	<-crowdDone
	<-injected
	if crowdErr != nil {
		e.t.Fatal(crowdErr)
	}
	e.logf("crowd done: %d requests, %d accepted", res.Requests, res.Counts.Accepted)
	if err := e.c.Revive(e.ctx); err != nil {
		e.t.Fatalf("revive: %v", err)
	}
	if err := e.chk.Drain(e.ctx, e.activity, 90*time.Second); err != nil {
		e.t.Errorf("drain: %v", err)
	}
	sampler.Stop()
	if err := e.c.Shutdown(30 * time.Second); err != nil {
		e.t.Errorf("SIGTERM: every process must exit 0: %v", err)
	}
	rep, err := e.chk.Check(e.ctx, e.activity, res.Answers, sampler)
	if err != nil {
		e.t.Fatal(err)
	}
	var b strings.Builder
	_ = res.WriteTable(&b)
	_ = e.faults.WriteTable(&b, "faults injected")
	_ = rep.WriteTable(&b)
	e.t.Logf("%s\n%s", e.t.Name(), b.String())
	for _, s := range res.Samples() {
		e.t.Logf("sample reply: %s", s)
	}
	if rep.Failed > 0 {
		e.t.Logf("failed orders by reason: %s", e.failureReasons())
	}
	return outcome{crowd: res, report: rep}
}

// failureReasons counts the activity's failed orders by reason.
func (e *env) failureReasons() string {
	rows, err := e.chk.DB.QueryContext(e.ctx, `SELECT reason, count(*) FROM order_failures WHERE activity_id = $1 GROUP BY reason ORDER BY reason`, e.activity)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var parts []string
	for rows.Next() {
		var reason string
		var n int64
		if err := rows.Scan(&reason, &n); err != nil {
			return err.Error()
		}
		parts = append(parts, fmt.Sprintf("%s %d", reason, n))
	}
	return strings.Join(parts, ", ")
}

// requireHeld fails the test for every check that did not hold, except
// those named as measured (they are logged as figures).
func requireHeld(t *testing.T, rep *check.Report, measured ...string) {
	t.Helper()
	for _, r := range rep.Results {
		switch {
		case r.Held:
		case slices.Contains(measured, r.Name):
			t.Logf("MEASURED (a known limit in this scenario, not a failure): %s: %d: %s", r.Name, r.Count, r.Detail)
		default:
			t.Errorf("invariant violated: %s: %d: %s", r.Name, r.Count, r.Detail)
		}
	}
}

// result returns the named check of rep.
func result(t *testing.T, rep *check.Report, name string) check.Result {
	t.Helper()
	r, ok := rep.Result(name)
	if !ok {
		t.Fatalf("no check %q in the report", name)
	}
	return r
}

// waitAccepted waits until the crowd has had n grabs accepted.
func waitAccepted(ctx context.Context, p *cluster.CrowdProgress, n int64) bool {
	return cluster.Wait(ctx, 2*time.Minute, func() bool { return p.Accepted() >= n })
}
