package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/seckilldev/seckill/check"
	"github.com/seckilldev/seckill/loadgen"
)

// Crowd describes users grabbing one activity through several API
// instances at once: one load generator per instance, every one over the
// same users, so that a user's clicks land on different instances.
type Crowd struct {
	URLs       []string // the API instances. Required.
	ActivityID int64    // Required.
	// Users is the number of distinct users. Default 1000.
	Users int
	// FirstUserID is the first user's id. Default 1.
	FirstUserID int64
	// Requests is the total number of grabs, split evenly over the URLs.
	// Default: every user once plus the repeats, per URL share.
	Requests int64
	// RepeatShare is the share of repeated clicks (loadgen.Config). Default 0.2.
	RepeatShare float64
	// Concurrency is the number of connections per URL. Default 16.
	Concurrency int
	// Rate bounds the grabs per second over all URLs; 0: unbounded. With
	// instances that die, a rate keeps a dead instance's clients from
	// burning their requests on refused connections.
	Rate float64
	// Timeout bounds one request. Default 5s.
	Timeout time.Duration
	// Seed makes the crowd reproducible; 0: random.
	Seed uint64
}

// CrowdProgress is the running total of a crowd.
type CrowdProgress struct {
	mu   sync.Mutex
	runs []loadgen.Progress
}

func (p *CrowdProgress) set(i int, pr loadgen.Progress) {
	p.mu.Lock()
	p.runs[i] = pr
	p.mu.Unlock()
}

// Accepted returns the 202 answers so far.
func (p *CrowdProgress) Accepted() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var n int64
	for _, r := range p.runs {
		n += r.Accepted
	}
	return n
}

// Requests returns the requests finished so far.
func (p *CrowdProgress) Requests() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var n int64
	for _, r := range p.runs {
		n += r.Requests
	}
	return n
}

// CrowdResult is what the crowd saw, summed over the instances.
type CrowdResult struct {
	Reports  []*loadgen.Report
	Requests int64
	Elapsed  time.Duration
	Counts   loadgen.Counts
	Status   map[int]int64
	// Answers is what the users were told, merged over the instances: the
	// input of the checker's I3, I4 and one-order-id checks.
	Answers *check.Answers
}

// Run sends the crowd and waits for it. progress, if set, is kept up to
// date while it runs.
func (cr Crowd) Run(ctx context.Context, progress *CrowdProgress) (*CrowdResult, error) {
	if len(cr.URLs) == 0 || cr.ActivityID <= 0 {
		return nil, errors.New("cluster: a crowd needs URLs and an activity")
	}
	if cr.Users == 0 {
		cr.Users = 1000
	}
	if cr.FirstUserID == 0 {
		cr.FirstUserID = 1
	}
	if cr.RepeatShare == 0 {
		cr.RepeatShare = 0.2
	}
	if cr.Concurrency == 0 {
		cr.Concurrency = 16
	}
	if cr.Timeout == 0 {
		cr.Timeout = 5 * time.Second
	}
	n := len(cr.URLs)
	if progress != nil {
		progress.mu.Lock()
		progress.runs = make([]loadgen.Progress, n)
		progress.mu.Unlock()
	}
	reports := make([]*loadgen.Report, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i, u := range cr.URLs {
		cfg := loadgen.Config{
			URL: u, ActivityID: cr.ActivityID, Users: cr.Users, FirstUserID: cr.FirstUserID,
			RepeatShare: cr.RepeatShare, Concurrency: cr.Concurrency, Timeout: cr.Timeout,
			Duration: time.Hour, SkipWarmup: true, ProgressInterval: 50 * time.Millisecond,
		}
		if cr.Requests > 0 {
			cfg.Requests = cr.Requests / int64(n)
			if i < int(cr.Requests%int64(n)) {
				cfg.Requests++
			}
		} else {
			cfg.Requests = int64(float64(cr.Users)/(1-cr.RepeatShare)) / int64(n)
		}
		if cr.Rate > 0 {
			cfg.Rate = cr.Rate / float64(n)
		}
		if cr.Seed != 0 {
			cfg.Seed = cr.Seed + uint64(i)
		}
		if progress != nil {
			cfg.Progress = func(p loadgen.Progress) { progress.set(i, p) }
		}
		wg.Go(func() { reports[i], errs[i] = loadgen.Run(ctx, cfg) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	res := &CrowdResult{Reports: reports, Elapsed: time.Since(start), Status: map[int]int64{}}
	byUser := map[int64][]int64{}
	uncertain := map[int64]bool{}
	for _, r := range reports {
		res.Requests += r.Requests
		addCounts(&res.Counts, r.Counts)
		for s, v := range r.Status {
			res.Status[s] += v
		}
		for uid, oids := range r.OrdersByUser() {
			for _, oid := range oids {
				if !slices.Contains(byUser[uid], oid) {
					byUser[uid] = append(byUser[uid], oid)
				}
			}
		}
		for _, uid := range r.UncertainUsers() {
			uncertain[uid] = true
		}
	}
	res.Answers = &check.Answers{ByUser: byUser, Uncertain: slices.Sorted(maps.Keys(uncertain))}
	return res, nil
}

func addCounts(sum *loadgen.Counts, c loadgen.Counts) {
	sum.Accepted += c.Accepted
	sum.Already += c.Already
	sum.SoldOut += c.SoldOut
	sum.NotStarted += c.NotStarted
	sum.Ended += c.Ended
	sum.NotFound += c.NotFound
	sum.Invalid += c.Invalid
	sum.Unavailable += c.Unavailable
	sum.Unknown += c.Unknown
	sum.Other += c.Other
	sum.Errors += c.Errors
	sum.Timeouts += c.Timeouts
}

// Samples returns the first few unexpected replies the instances' crowds
// kept.
func (r *CrowdResult) Samples() []string {
	var s []string
	for _, rep := range r.Reports {
		s = append(s, rep.Samples...)
	}
	return s
}

// ServerErrors counts the answers with a 5xx status other than the
// service's two answers for a Redis that failed: 503 (nothing was taken)
// and 504 (the grab may have been: ask again).
func (r *CrowdResult) ServerErrors() int64 {
	var n int64
	for s, v := range r.Status {
		if s >= 500 && s != 503 && s != 504 {
			n += v
		}
	}
	return n
}

// WriteTable prints the crowd's figures.
func (r *CrowdResult) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	c := r.Counts
	fmt.Fprintf(tw, "requests\t%d in %s over %d API instances\n", r.Requests, r.Elapsed.Round(time.Millisecond), len(r.Reports))
	for _, kv := range []struct {
		k string
		v int64
	}{
		{"  accepted (202)", c.Accepted}, {"  already (200)", c.Already}, {"  sold out (409)", c.SoldOut},
		{"  not started/ended (403)", c.NotStarted + c.Ended}, {"  not found (404)", c.NotFound},
		{"  invalid (400)", c.Invalid}, {"  unavailable (503)", c.Unavailable}, {"  outcome unknown (504)", c.Unknown}, {"  other replies", c.Other},
		{"  transport errors", c.Errors}, {"  timeouts", c.Timeouts},
	} {
		if kv.v > 0 || kv.k == "  accepted (202)" {
			fmt.Fprintf(tw, "%s\t%d\n", kv.k, kv.v)
		}
	}
	var codes []int
	for s := range r.Status {
		codes = append(codes, s)
	}
	sort.Ints(codes)
	line := ""
	for _, s := range codes {
		name := fmt.Sprint(s)
		if s == 0 {
			name = "none"
		}
		line += fmt.Sprintf("%s:%d ", name, r.Status[s])
	}
	fmt.Fprintf(tw, "  by status\t%s\n", line)
	users, uncertain := len(r.Answers.ByUser), len(r.Answers.Uncertain)
	fmt.Fprintf(tw, "users\t%d answered 200/202, %d with a request of unknown outcome\n", users, uncertain)
	return tw.Flush()
}

// Counter counts events by kind (the faults injected), safely.
type Counter struct {
	mu sync.Mutex
	n  map[string]int
	// order keeps the kinds in the order first seen.
	order []string
}

// Add counts one event of kind.
func (c *Counter) Add(kind string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	if _, ok := c.n[kind]; !ok {
		c.order = append(c.order, kind)
	}
	c.n[kind]++
}

// Get returns the count of kind.
func (c *Counter) Get(kind string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[kind]
}

// Total returns the count of every kind.
func (c *Counter) Total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := 0
	for _, v := range c.n {
		t += v
	}
	return t
}

// Map returns a copy of the counts.
func (c *Counter) Map() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.n)
}

// WriteTable prints one line per kind.
func (c *Counter) WriteTable(w io.Writer, title string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	total := 0
	for _, k := range c.order {
		total += c.n[k]
	}
	fmt.Fprintf(tw, "%s\t%d\n", title, total)
	for _, k := range c.order {
		fmt.Fprintf(tw, "  %s\t%d\n", k, c.n[k])
	}
	return tw.Flush()
}

// Wait polls cond every 20ms until it holds, ctx ends or timeout passes.
func Wait(ctx context.Context, timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	return true
}
