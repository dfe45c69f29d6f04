// Package soak runs a long flash sale on a real deployment of seckill
// processes while it kills and pauses them on a schedule, then checks
// every invariant (package check) against what the crowd was told and
// prints a table: requests, faults injected by kind, each invariant with
// its count.
//
// Run starts Config.APIs `seckill serve --no-worker` and Config.Workers
// `seckill worker` processes from Config.Binary on the Redis and database
// given, creates an activity, and sends the crowd through every API at
// once. Every Config.FaultEvery one fault is injected, in turn from
// Config.Faults: a worker killed with kill -9 and restarted (alternately
// under a new consumer name, so that its pending orders must be claimed,
// and under its old one, so that it must resume them), a worker stopped
// with SIGSTOP for three claim-idle periods and continued, an API instance
// killed with kill -9 and restarted on its address. When the crowd is
// done, stopped processes are continued and dead ones restarted, the order
// stream must drain, every process must exit 0 on SIGTERM, and the checker
// runs.
package soak

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/seckilldev/seckill/check"
	"github.com/seckilldev/seckill/faults/internal/cluster"
	"github.com/seckilldev/seckill/loadgen"
)

// Fault is a kind of fault the soak injects.
type Fault string

const (
	// WorkerKill kills a worker with kill -9 and restarts it at once.
	WorkerKill Fault = "worker-kill"
	// WorkerPause stops a worker with SIGSTOP for three times ClaimIdle,
	// then continues it.
	WorkerPause Fault = "worker-pause"
	// APIKill kills an API instance with kill -9 and restarts it on its
	// address half a second later.
	APIKill Fault = "api-kill"
)

// AllFaults are the kinds of fault, in the order injected by default.
var AllFaults = []Fault{WorkerKill, APIKill, WorkerPause}

// Config describes a soak. Zero values take the defaults given per field.
type Config struct {
	// Binary is the seckill binary to run (os.Executable() from the seckill
	// command itself). Required.
	Binary string
	// RedisURL is the Redis of the service: redis://host:port[/db].
	// Required. The soak's keys live under Prefix.
	RedisURL string
	// DBURL is the database of the service (postgres://, mysql://,
	// sqlite://), as seckill's --db takes it. Required. The service
	// migrates it; the soak adds one activity.
	DBURL string
	// Prefix is the services' --redis-prefix. Default "soak-" + random hex.
	Prefix string

	// Requests is the number of grabs, over all API instances. Default
	// 1,000,000.
	Requests int64
	// RepeatShare is the share of repeated clicks. Default 0.2.
	RepeatShare float64
	// Users is the number of distinct users; every user clicks through every
	// API instance. Default Requests * (1-RepeatShare) / APIs.
	Users int
	// Stock is the activity's stock. Default 9/10 of Users: the users come
	// evenly over the run, so the sale sells out near its end and the
	// faults land while orders flow.
	Stock int64
	// APIs is the number of API instances. Default 3.
	APIs int
	// Workers is the number of order workers. Default 2.
	Workers int
	// Concurrency is the number of connections per API instance. Default 32.
	Concurrency int
	// Rate bounds the grabs per second over all instances, so that the
	// clients of a killed instance fail at that pace instead of burning
	// their requests on refused connections. Default 5000; negative: no
	// bound.
	Rate float64
	// Timeout bounds one request. Default 5s.
	Timeout time.Duration

	// FaultEvery is the time between two faults. Default 10s; negative: no
	// faults.
	FaultEvery time.Duration
	// Faults are the kinds injected, in turn. Default AllFaults.
	Faults []Fault
	// ClaimIdle is the workers' --claim-idle. Default 1s.
	ClaimIdle time.Duration
	// Batch is the workers' --batch. Default 200.
	Batch int
	// DrainTimeout bounds the wait, after the crowd, for every accepted
	// grab to be written. Default 5 minutes.
	DrainTimeout time.Duration

	// Log, if set, receives the processes' log lines (warnings and errors),
	// each prefixed with the process name.
	Log io.Writer
	// Progress is how often a progress line is printed. Default 10s;
	// negative: never.
	Progress time.Duration
}

func (c *Config) defaults() error {
	if c.Binary == "" || c.RedisURL == "" || c.DBURL == "" {
		return errors.New("soak: Binary, RedisURL and DBURL are required")
	}
	if c.Prefix == "" {
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		c.Prefix = "soak-" + hex.EncodeToString(b)
	}
	if c.Requests == 0 {
		c.Requests = 1_000_000
	}
	if c.RepeatShare == 0 {
		c.RepeatShare = 0.2
	}
	if c.APIs == 0 {
		c.APIs = 3
	}
	if c.Workers == 0 {
		c.Workers = 2
	}
	if c.Users == 0 {
		c.Users = max(1, int(float64(c.Requests)*(1-c.RepeatShare))/c.APIs)
	}
	if c.Stock == 0 {
		c.Stock = max(1, int64(c.Users)*9/10)
	}
	if c.Concurrency == 0 {
		c.Concurrency = 32
	}
	if c.Rate == 0 {
		c.Rate = 5000
	}
	if c.Timeout == 0 {
		c.Timeout = 5 * time.Second
	}
	if c.FaultEvery == 0 {
		c.FaultEvery = 10 * time.Second
	}
	if len(c.Faults) == 0 {
		c.Faults = AllFaults
	}
	if c.ClaimIdle == 0 {
		c.ClaimIdle = time.Second
	}
	if c.Batch == 0 {
		c.Batch = 200
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = 5 * time.Minute
	}
	if c.Progress == 0 {
		c.Progress = 10 * time.Second
	}
	switch {
	case c.Requests < 0 || c.Users < 0 || c.Stock < 0:
		return errors.New("soak: Requests, Users and Stock must be positive")
	case c.APIs < 1 || c.Workers < 1:
		return errors.New("soak: at least one API instance and one worker are needed")
	case !(c.RepeatShare >= 0 && c.RepeatShare < 1):
		return errors.New("soak: RepeatShare must be in [0, 1)")
	}
	for _, f := range c.Faults {
		switch f {
		case WorkerKill, WorkerPause, APIKill:
		default:
			return fmt.Errorf("soak: unknown fault %q (want %s, %s or %s)", f, WorkerKill, WorkerPause, APIKill)
		}
	}
	return nil
}

// Result is what a soak did and found.
type Result struct {
	Config     Config // with the defaults filled in
	ActivityID int64

	// Requests is the number of grabs sent; Counts splits them by outcome
	// and Status by HTTP status (0: no response).
	Requests   int64
	Counts     loadgen.Counts
	Status     map[int]int64
	Elapsed    time.Duration // of the crowd
	Throughput float64       // requests per second

	// Faults counts the faults injected by kind.
	Faults map[Fault]int
	// Drain is how long the stream took to drain after the crowd.
	Drain time.Duration
	// DrainErr is set if it did not drain within DrainTimeout.
	DrainErr error
	// ShutdownErr names the processes that did not exit 0 on SIGTERM.
	ShutdownErr error
	// Report is the checker's verdict on every invariant.
	Report *check.Report

	crowd *cluster.CrowdResult
}

// ErrViolated is returned by Run, wrapped, when an invariant did not hold
// or the deployment did not drain or stop cleanly.
var ErrViolated = errors.New("soak: invariant violated")

// OK reports whether every invariant held, the stream drained and every
// process exited 0.
func (r *Result) OK() bool {
	return r.Report != nil && r.Report.OK() && r.DrainErr == nil && r.ShutdownErr == nil
}

// Run runs the soak and prints its progress and final table to out. It
// returns a Result whenever the sale took place; the error is non-nil if
// the soak could not run, or wraps ErrViolated if an invariant was
// violated.
func Run(ctx context.Context, cfg Config, out io.Writer) (*Result, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	began := time.Now()
	var logMu sync.Mutex
	logf := func(name, line string) {
		if cfg.Log == nil {
			return
		}
		logMu.Lock()
		fmt.Fprintf(cfg.Log, "%8.3fs %s: %s\n", time.Since(began).Seconds(), name, line)
		logMu.Unlock()
	}
	say := func(format string, args ...any) {
		fmt.Fprintf(out, "%8.3fs %s\n", time.Since(began).Seconds(), fmt.Sprintf(format, args...))
	}

	chk, err := cluster.OpenChecker(ctx, cfg.RedisURL, cfg.DBURL, cfg.Prefix)
	if err != nil {
		return nil, fmt.Errorf("soak: %w", err)
	}
	defer chk.Close()
	c, err := cluster.New(cluster.Config{Binary: cfg.Binary, RedisURL: cfg.RedisURL, DBURL: cfg.DBURL,
		Prefix: cfg.Prefix, ClaimIdle: cfg.ClaimIdle, Batch: cfg.Batch, Log: logf})
	if err != nil {
		return nil, fmt.Errorf("soak: %w", err)
	}
	defer c.Kill()
	for range cfg.APIs {
		if _, err := c.StartAPI(ctx); err != nil {
			return nil, fmt.Errorf("soak: %w", err)
		}
	}
	for range cfg.Workers {
		if _, err := c.StartWorker(""); err != nil {
			return nil, fmt.Errorf("soak: %w", err)
		}
	}
	id, err := c.CreateActivity(ctx, "soak "+cfg.Prefix, cfg.Stock, 24*time.Hour, 0)
	if err != nil {
		return nil, fmt.Errorf("soak: %w", err)
	}
	res := &Result{Config: cfg, ActivityID: id, Faults: map[Fault]int{}}
	say("soak: activity %d (redis prefix %s), stock %d, %d users; %d API instances, %d workers; %d grabs at most %.0f/s; a fault every %s (%s)",
		id, cfg.Prefix, cfg.Stock, cfg.Users, cfg.APIs, cfg.Workers, cfg.Requests, cfg.Rate, cfg.FaultEvery, faultList(cfg.Faults))

	sampler := chk.Sample(id, 100*time.Millisecond)
	progress := &cluster.CrowdProgress{}
	crowdCtx, stopCrowd := context.WithCancel(ctx)
	defer stopCrowd()
	injectCtx, stopInject := context.WithCancel(ctx)
	var faults cluster.Counter
	injected := make(chan struct{})
	go func() {
		defer close(injected)
		inject(injectCtx, c, chk, id, cfg, &faults, say)
	}()
	if cfg.Progress > 0 {
		go func() {
			t := time.NewTicker(cfg.Progress)
			defer t.Stop()
			for {
				select {
				case <-injectCtx.Done():
					return
				case <-t.C:
					say("%d requests, %d accepted, %d faults", progress.Requests(), progress.Accepted(), faults.Total())
				}
			}
		}()
	}
	rate := cfg.Rate
	if rate < 0 {
		rate = 0
	}
	crowd, err := cluster.Crowd{URLs: c.URLs(), ActivityID: id, Users: cfg.Users, Requests: cfg.Requests,
		RepeatShare: cfg.RepeatShare, Concurrency: cfg.Concurrency, Rate: rate, Timeout: cfg.Timeout}.Run(crowdCtx, progress)
	stopInject()
	<-injected
	if err != nil {
		sampler.Stop()
		return nil, fmt.Errorf("soak: %w", err)
	}
	res.crowd = crowd
	res.Requests, res.Counts, res.Status, res.Elapsed = crowd.Requests, crowd.Counts, crowd.Status, crowd.Elapsed
	if crowd.Elapsed > 0 {
		res.Throughput = float64(crowd.Requests) / crowd.Elapsed.Seconds()
	}
	for k, v := range faults.Map() {
		res.Faults[Fault(k)] = v
	}
	say("crowd done: %d requests in %s; recovering and draining", crowd.Requests, crowd.Elapsed.Round(time.Millisecond))

	if err := c.Revive(ctx); err != nil {
		sampler.Stop()
		return nil, fmt.Errorf("soak: recover the processes: %w", err)
	}
	drainStart := time.Now()
	res.DrainErr = chk.Drain(ctx, id, cfg.DrainTimeout)
	res.Drain = time.Since(drainStart)
	sampler.Stop()
	res.ShutdownErr = c.Shutdown(30 * time.Second)
	if res.Report, err = chk.Check(ctx, id, crowd.Answers, sampler); err != nil {
		return nil, fmt.Errorf("soak: %w", err)
	}
	if err := res.WriteTable(out); err != nil {
		return res, err
	}
	if !res.OK() {
		var why []error
		if err := res.Report.Err(); err != nil {
			why = append(why, err)
		}
		if res.DrainErr != nil {
			why = append(why, res.DrainErr)
		}
		if res.ShutdownErr != nil {
			why = append(why, res.ShutdownErr)
		}
		return res, fmt.Errorf("%w: %w", ErrViolated, errors.Join(why...))
	}
	return res, nil
}

func faultList(fs []Fault) string {
	s := make([]string, len(fs))
	for i, f := range fs {
		s[i] = string(f)
	}
	return strings.Join(s, ", ")
}

// inject runs the fault schedule until ctx ends.
func inject(ctx context.Context, c *cluster.Cluster, chk *cluster.Checker, id int64, cfg Config,
	faults *cluster.Counter, say func(string, ...any)) {
	if cfg.FaultEvery < 0 {
		return
	}
	t := time.NewTicker(cfg.FaultEvery)
	defer t.Stop()
	var n, kills, pauses, apiKills int
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f := cfg.Faults[n%len(cfg.Faults)]
		n++
		switch f {
		case WorkerKill:
			ws := c.Workers()
			w := ws[kills%len(ws)]
			kills++
			old := w.Consumer()
			w.Proc().Kill()
			inHand, _ := chk.PendingOf(context.WithoutCancel(ctx), id, old)
			next := old
			if kills%2 == 1 {
				next = fmt.Sprintf("%s-%d", w.Name, kills)
			}
			if err := c.RestartWorker(w, next); err != nil {
				say("FAULT %s: restart %s: %v", f, w.Name, err)
				continue
			}
			faults.Add(string(f))
			say("FAULT %s: %s (consumer %s, %d orders in hand) killed, restarted as %s", f, w.Name, old, inHand, next)
		case WorkerPause:
			ws := c.Workers()
			w := ws[pauses%len(ws)]
			pauses++
			p := w.Proc()
			if err := p.Stop(); err != nil {
				say("FAULT %s: %v", f, err)
				continue
			}
			faults.Add(string(f))
			inHand, _ := chk.PendingOf(context.WithoutCancel(ctx), id, w.Consumer())
			say("FAULT %s: %s stopped with %d orders in hand for %s", f, w.Name, inHand, 3*cfg.ClaimIdle)
			select {
			case <-ctx.Done():
			case <-time.After(3 * cfg.ClaimIdle):
			}
			if err := p.Cont(); err != nil {
				say("FAULT %s: %v", f, err)
			}
		case APIKill:
			as := c.APIs()
			a := as[apiKills%len(as)]
			apiKills++
			a.Proc().Kill()
			faults.Add(string(f))
			time.Sleep(500 * time.Millisecond)
			if err := c.RestartAPI(context.WithoutCancel(ctx), a); err != nil {
				say("FAULT %s: restart %s: %v", f, a.Name, err)
				continue
			}
			say("FAULT %s: %s killed and restarted", f, a.Name)
		}
	}
}

// WriteTable prints the soak's table: requests, faults, drain, shutdown
// and every invariant with its count.
func (r *Result) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "\nSOAK activity %d: stock %d, %d users, %d API instances, %d workers\n",
		r.ActivityID, r.Config.Stock, r.Config.Users, r.Config.APIs, r.Config.Workers)
	if r.crowd != nil {
		if err := r.crowd.WriteTable(w); err != nil {
			return err
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "throughput\t%.0f req/s\n", r.Throughput)
	total := 0
	for _, v := range r.Faults {
		total += v
	}
	fmt.Fprintf(tw, "faults injected\t%d\n", total)
	for _, f := range AllFaults {
		if n, ok := r.Faults[f]; ok {
			fmt.Fprintf(tw, "  %s\t%d\n", f, n)
		}
	}
	drain := fmt.Sprintf("drained in %s", r.Drain.Round(time.Millisecond))
	if r.DrainErr != nil {
		drain = "NOT DRAINED: " + r.DrainErr.Error()
	}
	fmt.Fprintf(tw, "drain\t%s\n", drain)
	shutdown := fmt.Sprintf("all %d processes exited 0 on SIGTERM", r.Config.APIs+r.Config.Workers)
	if r.ShutdownErr != nil {
		shutdown = "FAILED: " + strings.ReplaceAll(r.ShutdownErr.Error(), "\n", "; ")
	}
	fmt.Fprintf(tw, "shutdown\t%s\n", shutdown)
	if err := tw.Flush(); err != nil {
		return err
	}
	if r.Report == nil {
		return nil
	}
	fmt.Fprintln(w)
	if err := r.Report.WriteTable(w); err != nil {
		return err
	}
	verdict := "PASS"
	if !r.OK() {
		verdict = "FAIL"
	}
	_, err := fmt.Fprintf(w, "%s: %d grabs, %d faults, %d confirmed of stock %d, %d lost, %d oversold\n",
		verdict, r.Requests, total, r.Report.Confirmed, r.Report.Stock, count(r.Report, check.NoLostOrder), count(r.Report, check.NoOversell))
	return err
}

func count(rep *check.Report, name string) int64 {
	r, _ := rep.Result(name)
	return r.Count
}
