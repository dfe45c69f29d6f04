// Package loadgen is a load generator for a flash sale that checks what it
// is told: a crowd of users grabs one activity through the HTTP API, some of
// them clicking again, and every answer is counted, timed and, for accepted
// grabs, remembered per user so that the invariant checker (package check)
// can tell whether an order was lost or made up.
//
// The generator shares the machine with the server it measures, so the hot
// loop is frugal and allocates nothing: workers take the next request
// number from an atomic counter, each sends on its own keep-alive
// connection with a minimal HTTP/1.1 client (net/http's Transport, shared
// and pooled, for https:// or on request), replies are scanned in place
// instead of decoded, and latencies go to per-worker histograms merged at
// the end.
//
// With Config.Queue the crowd goes through the sale's waiting room instead
// (queue.go): each user joins, polls when told, and grabs once admitted.
package loadgen

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// Config describes one run. Zero values take the defaults given per field.
// A run is always bounded: it stops after Requests requests or after
// Duration, whichever comes first.
type Config struct {
	// URL is the base URL of the service, e.g. "http://127.0.0.1:8080".
	URL string
	// ActivityID is the activity every user grabs. Required (> 0).
	ActivityID int64
	// Users is the number of distinct users in the crowd. Default 10000.
	Users int
	// FirstUserID is the id of the first user; users are FirstUserID,
	// FirstUserID+1, ... Default 1.
	FirstUserID int64
	// UserIDs, if set, are the crowd's users instead (Users is then their
	// number, and FirstUserID unused): a crowd homed in a few of a sale's
	// buckets, say (see stock.Home). Distinct and positive.
	UserIDs []int64
	// Requests bounds the number of grabs sent. Default, when Duration is
	// also zero: enough for every user to click once plus the repeated
	// clicks (Users / (1 - RepeatShare)). Zero with a Duration: no count
	// bound.
	Requests int64
	// Duration bounds the time spent sending, counted from the start gate.
	// Default 10 minutes, so that a run always ends by itself.
	Duration time.Duration
	// Concurrency is the number of workers, each with its own keep-alive
	// connection (and a latency histogram of about 140 KB). Default 64, at
	// most 10000.
	Concurrency int
	// RepeatShare is the share of requests, in [0, 1), that are a user
	// clicking again: half of them a user who clicked a moment ago (often
	// still in flight: a double click), half any user who clicked before.
	// First clicks are spread evenly over the requests; once every user
	// has clicked, all further requests are repeats. Default 0.
	RepeatShare float64
	// StartAt, if set, holds the crowd until that time (connections are
	// warmed up before it).
	StartAt time.Time
	// Rate limits the grabs to this many per second overall; 0 means as
	// fast as the workers go. Default 0.
	Rate float64
	// Timeout bounds one request: the whole exchange on the built-in
	// client, up to the response headers with NetHTTP (replies are small
	// either way). A request that exceeds it counts as a timeout, and its
	// user as uncertain. Default 5s.
	Timeout time.Duration
	// SkipWarmup leaves out the warm-up: by default every worker sends one
	// GET /healthz before the start, so the sale starts on open connections.
	SkipWarmup bool
	// Seed makes the crowd's choice of users reproducible. Default: random.
	Seed uint64

	// Progress, if set, is called every ProgressInterval from one goroutine
	// while the run lasts, and once more at the end with Final set.
	Progress func(Progress)
	// ProgressInterval defaults to 250ms.
	ProgressInterval time.Duration
	// NetHTTP sends through net/http's Transport instead of the built-in
	// HTTP/1.1 client (https:// targets always do). Default false.
	NetHTTP bool
	// WatchRemaining makes the run poll GET /api/v1/activities/{id} on a
	// connection of its own at every progress tick, to report the remaining
	// stock. Default false.
	WatchRemaining bool
	// Queue, if set, sends the crowd through the activity's waiting room
	// (see Queue) instead of grabbing at once; Requests and RepeatShare
	// do not apply, and StartAt is the sale's start.
	Queue *Queue

	// Token, if set, returns a bearer token naming a user: each grab then
	// sends Authorization: Bearer <token> instead of X-User-ID, for a
	// service that verifies who its buyers are (auth.Signer.Token mints
	// them). It is called for every request: minting costs a few
	// microseconds and allocates, which the generator's CPU pays.
	Token func(uid int64) (string, error)
}

const (
	defaultUsers       = 10000
	defaultConcurrency = 64
	defaultTimeout     = 5 * time.Second
	defaultDuration    = 10 * time.Minute
	maxUsers           = 50_000_000
	maxConcurrency     = 10_000
)

// withDefaults validates c and fills in the defaults.
func (c Config) withDefaults() (Config, error) {
	if c.URL == "" {
		return c, errors.New("loadgen: URL is required")
	}
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return c, fmt.Errorf("loadgen: URL %q is not an http(s) base URL", c.URL)
	}
	if c.ActivityID <= 0 {
		return c, errors.New("loadgen: ActivityID must be positive")
	}
	if c.UserIDs != nil {
		if c.Users != 0 && c.Users != len(c.UserIDs) {
			return c, errors.New("loadgen: Users and len(UserIDs) differ")
		}
		c.Users = len(c.UserIDs)
		seen := make(map[int64]bool, len(c.UserIDs))
		for _, id := range c.UserIDs {
			if id <= 0 || seen[id] {
				return c, fmt.Errorf("loadgen: UserIDs: %d is not positive or not distinct", id)
			}
			seen[id] = true
		}
	}
	if c.Users == 0 {
		c.Users = defaultUsers
	}
	if c.Users < 0 || c.Users > maxUsers {
		return c, fmt.Errorf("loadgen: Users must be between 1 and %d", maxUsers)
	}
	if c.FirstUserID == 0 {
		c.FirstUserID = 1
	}
	if c.FirstUserID < 0 || c.FirstUserID > 1<<62 {
		return c, errors.New("loadgen: FirstUserID must be positive")
	}
	if !(c.RepeatShare >= 0 && c.RepeatShare < 1) {
		return c, errors.New("loadgen: RepeatShare must be in [0, 1)")
	}
	if c.Requests < 0 || c.Duration < 0 || !(c.Rate >= 0) || c.Timeout < 0 || c.Concurrency < 0 {
		return c, errors.New("loadgen: negative Requests, Duration, Rate, Timeout or Concurrency")
	}
	if c.Concurrency > maxConcurrency {
		return c, fmt.Errorf("loadgen: Concurrency must be at most %d", maxConcurrency)
	}
	if q := c.Queue; q != nil {
		if !(q.JoinRate >= 0) || q.Early < 0 {
			return c, errors.New("loadgen: negative Queue.JoinRate or Queue.Early")
		}
		if q.Early > 0 && c.StartAt.IsZero() {
			return c, errors.New("loadgen: Queue.Early needs StartAt, the sale's start")
		}
		if c.Requests != 0 || c.RepeatShare != 0 || c.Rate != 0 {
			return c, errors.New("loadgen: Requests, RepeatShare and Rate do not apply to a run through the waiting room")
		}
		if c.Duration == 0 {
			c.Duration = defaultDuration
		}
	}
	if c.Requests == 0 && c.Duration == 0 {
		c.Requests = int64(math.Ceil(float64(c.Users) / (1 - c.RepeatShare)))
	}
	if c.Duration == 0 {
		c.Duration = defaultDuration
	}
	if c.Concurrency == 0 {
		c.Concurrency = defaultConcurrency
	}
	if c.Requests > 0 && int64(c.Concurrency) > c.Requests {
		c.Concurrency = int(c.Requests)
	}
	if c.Timeout == 0 {
		c.Timeout = defaultTimeout
	}
	if c.ProgressInterval <= 0 {
		c.ProgressInterval = 250 * time.Millisecond
	}
	if c.Seed == 0 {
		c.Seed = rand.Uint64()
	}
	c.URL = strings.TrimRight(c.URL, "/")
	return c, nil
}

// run is the shared state of one run.
type run struct {
	cfg    Config
	start  time.Time // the gate: every offset below is counted from here
	stopAt time.Duration
	ctx    context.Context

	next      atomic.Int64 // next request number
	done      atomic.Int64 // requests finished
	counts    [numOutcomes]atomic.Int64
	status    [600]atomic.Int64 // by HTTP status; 0 = no response
	firstAcc  atomic.Int64      // offset of the first accepted grab + 1; 0 = none yet
	firstSold atomic.Int64      // offset of the first sold_out answer + 1
	lastAcc   atomic.Int64      // offset of the last accepted grab + 1
	// lastAccSent is the offset at which the last-sent accepted grab was
	// sent, + 1; soldAt counts the sold_out answers by the slot (of
	// soldSlot) of their arrival. Together they tell how many sold_out
	// answers came before a grab that was still sold a unit (see
	// Report.SoldOutEarly).
	lastAccSent atomic.Int64
	soldAt      []atomic.Int32
	soldSlot    time.Duration

	users []userState

	mu        sync.Mutex
	conflicts []answer // second order ids told to a user (rare: a bug in the service)
	samples   []string // the first few unexpected replies and errors
}

// userState is what the crowd learnt about one user. Written with atomics:
// two workers may answer the same user at once.
type userState struct {
	order     atomic.Int64  // the first order id answered 200/202; 0 = none
	uncertain atomic.Uint32 // 1: a request whose outcome is unknown
	clicks    atomic.Uint32
}

type answer struct{ user, order int64 }

const maxSamples = 8

// warmupLead is how long before the start gate the connections are opened:
// late enough that no server's idle timeout closes them before the sale.
const warmupLead = time.Second

// Run sends the crowd at the activity and returns what it saw. It returns
// an error only for an invalid Config; failed requests are counted in the
// Report. Cancelling ctx stops the run early (requests in flight count as
// errors) and still returns the Report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	base, err := url.Parse(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("loadgen: %w", err)
	}
	r := &run{cfg: cfg, users: make([]userState, cfg.Users)}
	// 100 µs a slot, or coarser for runs over about 100 s: at most a
	// million slots (4 MB).
	r.soldSlot = max(100*time.Microsecond, (cfg.Duration+cfg.Timeout+time.Second)/(1<<20))
	r.soldAt = make([]atomic.Int32, (cfg.Duration+cfg.Timeout+time.Second)/r.soldSlot+2)
	var tr *http.Transport
	if cfg.NetHTTP || base.Scheme == "https" {
		tr = newTransport(cfg.Concurrency, cfg.Timeout)
		defer tr.CloseIdleConnections()
	}
	workers := make([]*worker, cfg.Concurrency)
	for i := range workers {
		var cl client
		if tr != nil {
			cl = newStdClient(tr, base, cfg.ActivityID, cfg.Token)
		} else {
			cl = newRawConn(base, cfg.ActivityID, cfg.Timeout, cfg.Token)
		}
		defer cl.close()
		workers[i] = newWorker(r, cl, cfg.Seed+uint64(i)*0x9e3779b97f4a7c15)
	}

	var q *queueRun
	if cfg.Queue != nil {
		q = newQueueRun(r)
		for _, w := range workers {
			w.qhist, w.lag = hdrhistogram.New(1, histMax, 3), hdrhistogram.New(1, histMax, 3)
		}
	}
	gate := cfg.StartAt // the crowd's first request
	if q != nil && !gate.IsZero() {
		gate = gate.Add(-cfg.Queue.Early)
	}
	if !gate.IsZero() {
		if err := sleepCtx(ctx, time.Until(gate)-warmupLead); err != nil {
			return r.report(0, workers), nil
		}
	}
	if !cfg.SkipWarmup {
		var wg sync.WaitGroup
		for _, w := range workers {
			wg.Go(func() { w.cl.warmup(ctx) })
		}
		wg.Wait()
	}
	if !gate.IsZero() {
		if err := sleepCtx(ctx, time.Until(gate)); err != nil {
			return r.report(0, workers), nil
		}
	}

	// The hard deadline lets requests in flight at the end of Duration
	// finish (or time out) and no more.
	r.start = time.Now()
	r.stopAt = cfg.Duration
	runCtx, cancel := context.WithDeadline(ctx, r.start.Add(cfg.Duration+cfg.Timeout+time.Second))
	defer cancel()
	r.ctx = runCtx
	stopAbort := context.AfterFunc(runCtx, func() {
		for _, w := range workers {
			w.cl.abort()
		}
	})
	defer stopAbort()

	progressDone := make(chan struct{})
	stopProgress := make(chan struct{})
	go func() {
		defer close(progressDone)
		r.progressLoop(runCtx, stopProgress)
	}()

	var wg sync.WaitGroup
	for _, w := range workers {
		if q != nil {
			wg.Go(func() { q.loop(w) })
		} else {
			wg.Go(w.loop)
		}
	}
	if q != nil {
		wg.Go(q.dispatch)
	}
	wg.Wait()
	elapsed := time.Since(r.start)
	close(stopProgress)
	<-progressDone
	rep := r.report(elapsed, workers)
	if q != nil {
		rep.Queue = q.report(rep, elapsed, workers)
	}
	return rep, nil
}

// outcome classifies one request.
type outcome int

const (
	outAccepted outcome = iota
	outAlready
	outSoldOut
	outNotStarted
	outEnded
	outNotFound
	outInvalid
	outUnavailable // 503 unavailable: the service says nothing happened
	outUnknown     // 504 outcome_unknown: it may have happened
	outOther
	outError
	outTimeout
	numOutcomes
)

// definite reports whether o is an answer that settles what happened to
// the user's click; after any other outcome the service may or may not
// hold an order for the user. A 503 unavailable is the service's word
// that nothing happened: a user told only that who holds an order was
// told a lie (the checker's phantom orders).
func (o outcome) definite() bool {
	switch o {
	case outAccepted, outAlready, outSoldOut, outNotStarted, outEnded, outNotFound, outInvalid, outUnavailable:
		return true
	}
	return false
}

// worker sends requests one after another on its own connection.
type worker struct {
	r     *run
	cl    client
	rng   *rand.Rand
	hist  *hdrhistogram.Histogram
	qhist *hdrhistogram.Histogram // the waiting room's polls (Config.Queue)
	lag   *hdrhistogram.Histogram // how late the room's requests were sent
	buf   []byte
}

// Latencies are recorded in microseconds up to a minute (longer ones are
// clamped to it).
const histMax = int64(time.Minute / time.Microsecond)

func newWorker(r *run, cl client, seed uint64) *worker {
	return &worker{
		r:    r,
		cl:   cl,
		rng:  rand.New(rand.NewPCG(seed, seed^0xda942042e4dd58b5)),
		hist: hdrhistogram.New(1, histMax, 3),
		buf:  make([]byte, 4096),
	}
}

func (w *worker) loop() {
	r := w.r
	cfg := &r.cfg
	var interval time.Duration
	if cfg.Rate > 0 {
		interval = time.Duration(float64(time.Second) / cfg.Rate)
	}
	for {
		i := r.next.Add(1) - 1
		if cfg.Requests > 0 && i >= cfg.Requests {
			return
		}
		now := time.Since(r.start)
		if now >= r.stopAt || r.ctx.Err() != nil {
			return
		}
		if interval > 0 {
			// Request i is due at i intervals after the start: one global
			// schedule, whatever the number of workers.
			if due := time.Duration(i) * interval; due > now {
				if due >= r.stopAt {
					return
				}
				if sleepCtx(r.ctx, due-now) != nil {
					return
				}
			}
		}
		w.grab(w.pickUser(i), "")
	}
}

// pickUser returns the index of the user who sends request i. First
// clicks are spread evenly: request i is user k's first click when the
// share 1-RepeatShare of i crosses k, so Users/(1-RepeatShare) requests
// make every user click once. The others are repeats of a user who has
// clicked already.
func (w *worker) pickUser(i int64) int {
	r := w.r
	n := int64(len(r.users))
	first := 1 - r.cfg.RepeatShare
	k := int64(float64(i) * first)
	if int64(float64(i+1)*first) > k && k < n {
		return int(k)
	}
	clicked := min(k, n)
	if clicked == 0 {
		return 0
	}
	if w.rng.Uint32()&1 == 0 {
		// A double click: one of the users who clicked just now, most
		// likely still waiting for their first answer.
		recent := min(clicked, int64(r.cfg.Concurrency))
		return int(clicked - 1 - w.rng.Int64N(recent))
	}
	return int(w.rng.Int64N(clicked))
}

// grab sends user k's grab, with the waiting room's pass if not "", and
// counts what it is told.
func (w *worker) grab(k int, pass string) outcome {
	r := w.r
	uid := r.cfg.userID(k)
	u := &r.users[k]
	u.clicks.Add(1)

	t0 := time.Now()
	status, n, err := w.cl.grab(uid, pass, w.buf)
	var (
		out   outcome
		order int64
	)
	if err != nil {
		out = w.classifyError(err)
	} else {
		out, order = classify(status, w.buf[:n])
		if out == outOther {
			r.sample(func() string { return fmt.Sprintf("HTTP %d: %.200s", status, w.buf[:n]) })
		}
	}
	lat := time.Since(t0)
	end := time.Since(r.start)

	if out != outError {
		us := min(max(int64(lat/time.Microsecond), 1), histMax)
		_ = w.hist.RecordValue(us)
	}
	r.counts[out].Add(1)
	if err != nil {
		status = 0
	}
	if status >= 0 && status < len(r.status) {
		r.status[status].Add(1)
	}
	switch out {
	case outAccepted:
		casFirst(&r.firstAcc, int64(end)+1)
		storeMax(&r.lastAcc, int64(end)+1)
		storeMax(&r.lastAccSent, int64(t0.Sub(r.start))+1)
		w.remember(u, uid, order)
	case outAlready:
		w.remember(u, uid, order)
	case outSoldOut:
		casFirst(&r.firstSold, int64(end)+1)
		r.soldAt[min(max(int(end/r.soldSlot), 0), len(r.soldAt)-1)].Add(1)
	}
	if !out.definite() {
		u.uncertain.Store(1)
	}
	r.done.Add(1)
	return out
}

// userID returns the id of user k of the crowd.
func (c *Config) userID(k int) int64 {
	if c.UserIDs != nil {
		return c.UserIDs[k]
	}
	return c.FirstUserID + int64(k)
}

func casFirst(v *atomic.Int64, t int64) {
	v.CompareAndSwap(0, t)
}

func storeMax(v *atomic.Int64, t int64) {
	for {
		old := v.Load()
		if old >= t || v.CompareAndSwap(old, t) {
			return
		}
	}
}

// remember records the order id told to the user; a second, different one
// is kept aside as a conflict.
func (w *worker) remember(u *userState, uid, order int64) {
	if u.order.CompareAndSwap(0, order) {
		return
	}
	if u.order.Load() != order {
		r := w.r
		r.mu.Lock()
		r.conflicts = append(r.conflicts, answer{uid, order})
		r.mu.Unlock()
	}
}

func (w *worker) classifyError(err error) outcome {
	var ne net.Error
	if errors.Is(err, errAborted) {
		return outError
	}
	if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded) {
		return outTimeout
	}
	w.r.sample(func() string { return "error: " + err.Error() })
	return outError
}

func (r *run) sample(msg func() string) {
	r.mu.Lock()
	if len(r.samples) < maxSamples {
		r.samples = append(r.samples, msg())
	}
	r.mu.Unlock()
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
