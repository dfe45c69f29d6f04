package loadgen

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// Report is what a run saw. It marshals to JSON with encoding/json
// (durations in nanoseconds); the per-user answers that the checker needs
// are not part of the JSON but come from OrdersByUser and UncertainUsers.
type Report struct {
	Target      string  `json:"target"`
	ActivityID  int64   `json:"activity_id"`
	Users       int     `json:"users"`
	Concurrency int     `json:"concurrency"`
	RepeatShare float64 `json:"repeat_share"`
	Rate        float64 `json:"rate_limit,omitempty"`

	// Requests is the number of requests that finished, answered or not.
	Requests int64 `json:"requests"`
	// Elapsed runs from the start gate until the last request finished.
	Elapsed    time.Duration `json:"elapsed_ns"`
	Throughput float64       `json:"requests_per_sec"`

	Counts Counts `json:"counts"`
	// Status counts the requests by HTTP status; 0 counts those without a
	// response.
	Status map[int]int64 `json:"status"`
	// Latency covers every request that got a response or timed out.
	Latency Latency `json:"latency"`

	// FirstAccepted and LastAccepted are offsets from the start gate, zero
	// if nothing was accepted; FirstSoldOut likewise for the first
	// sold_out answer. SellOut is FirstSoldOut - FirstAccepted, zero unless
	// both happened.
	FirstAccepted time.Duration `json:"first_accepted_ns"`
	LastAccepted  time.Duration `json:"last_accepted_ns"`
	FirstSoldOut  time.Duration `json:"first_sold_out_ns"`
	SellOut       time.Duration `json:"sell_out_ns"`
	// SoldOutEarly counts the sold_out answers that arrived before a grab
	// was sent that was then answered 202: "sold out" said while the sale
	// still had a unit to sell (unless a unit came back in between, from a
	// cancelled, expired or failed order). Answers that arrived close to
	// that send (within 100 µs in a run of up to 100 s) count too.
	SoldOutEarly int64 `json:"sold_out_early"`

	// UsersClicked is the number of distinct users who sent a grab;
	// UsersWithOrder those answered 200/202; UsersConflicting those told
	// more than one order id (a bug in the service); UsersUncertain those
	// with a request of unknown outcome (timeout, transport error, 5xx,
	// unexpected reply), for whom the service may hold an order that
	// nobody was told about.
	UsersClicked     int64 `json:"users_clicked"`
	UsersWithOrder   int64 `json:"users_with_order"`
	UsersConflicting int64 `json:"users_conflicting"`
	UsersUncertain   int64 `json:"users_uncertain"`

	// Samples holds the first few unexpected replies and errors.
	Samples []string `json:"samples,omitempty"`

	// Queue is the waiting room's side of a run with Config.Queue; the
	// counts and latency above are the grabs', which only admitted users
	// send.
	Queue *QueueReport `json:"queue,omitempty"`

	cfg       *Config // for userID
	users     []userState
	conflicts []answer
}

// Counts splits the requests by outcome; they add up to Report.Requests.
type Counts struct {
	Accepted    int64 `json:"accepted"`    // 202: a new order
	Already     int64 `json:"already"`     // 200: the user's existing order
	SoldOut     int64 `json:"sold_out"`    // 409 sold_out
	NotStarted  int64 `json:"not_started"` // 403 not_started
	Ended       int64 `json:"ended"`       // 403 ended
	NotFound    int64 `json:"not_found"`   // 404
	Invalid     int64 `json:"invalid"`     // 400
	Unavailable int64 `json:"unavailable"` // 503 unavailable: surely not done
	Unknown     int64 `json:"unknown"`     // 504 outcome_unknown: maybe done; the next grab tells
	Other       int64 `json:"other"`       // any other status, or a 200/202 without an order id
	Errors      int64 `json:"errors"`      // transport errors (refused, reset, cancelled)
	Timeouts    int64 `json:"timeouts"`    // no response headers within Config.Timeout
}

// Total is the sum of all counts.
func (c Counts) Total() int64 {
	return c.Accepted + c.Already + c.SoldOut + c.NotStarted + c.Ended + c.NotFound +
		c.Invalid + c.Unavailable + c.Unknown + c.Other + c.Errors + c.Timeouts
}

// Latency summarises the latency histogram.
type Latency struct {
	Count int64         `json:"count"`
	Mean  time.Duration `json:"mean_ns"`
	P50   time.Duration `json:"p50_ns"`
	P95   time.Duration `json:"p95_ns"`
	P99   time.Duration `json:"p99_ns"`
	P999  time.Duration `json:"p999_ns"`
	Max   time.Duration `json:"max_ns"`
}

func (r *run) report(elapsed time.Duration, workers []*worker) *Report {
	cfg := r.cfg
	h := hdrhistogram.New(1, histMax, 3)
	for _, w := range workers {
		h.Merge(w.hist)
	}
	rep := &Report{
		Target:      cfg.URL,
		ActivityID:  cfg.ActivityID,
		Users:       cfg.Users,
		Concurrency: cfg.Concurrency,
		RepeatShare: cfg.RepeatShare,
		Rate:        cfg.Rate,
		Requests:    r.done.Load(),
		Elapsed:     elapsed,
		Status:      map[int]int64{},
		Latency:     latencyOf(h),
		cfg:         &cfg,
		users:       r.users,
	}
	if elapsed > 0 {
		rep.Throughput = float64(rep.Requests) / elapsed.Seconds()
	}
	c := &r.counts
	rep.Counts = Counts{
		Accepted: c[outAccepted].Load(), Already: c[outAlready].Load(), SoldOut: c[outSoldOut].Load(),
		NotStarted: c[outNotStarted].Load(), Ended: c[outEnded].Load(), NotFound: c[outNotFound].Load(),
		Invalid: c[outInvalid].Load(), Unavailable: c[outUnavailable].Load(), Unknown: c[outUnknown].Load(), Other: c[outOther].Load(),
		Errors: c[outError].Load(), Timeouts: c[outTimeout].Load(),
	}
	for s := range r.status {
		if n := r.status[s].Load(); n > 0 {
			rep.Status[s] = n
		}
	}
	if v := r.firstAcc.Load(); v > 0 {
		rep.FirstAccepted = time.Duration(v - 1)
		rep.LastAccepted = time.Duration(r.lastAcc.Load() - 1)
	}
	if v := r.lastAccSent.Load(); v > 0 {
		last := min(int(time.Duration(v-1)/r.soldSlot), len(r.soldAt)-1)
		for i := 0; i <= last; i++ {
			rep.SoldOutEarly += int64(r.soldAt[i].Load())
		}
	}
	if v := r.firstSold.Load(); v > 0 {
		rep.FirstSoldOut = time.Duration(v - 1)
		if r.firstAcc.Load() > 0 {
			rep.SellOut = max(rep.FirstSoldOut-rep.FirstAccepted, 0)
		}
	}
	for i := range r.users {
		u := &r.users[i]
		if u.clicks.Load() > 0 {
			rep.UsersClicked++
		}
		if u.order.Load() != 0 {
			rep.UsersWithOrder++
		}
		if u.uncertain.Load() != 0 {
			rep.UsersUncertain++
		}
	}
	r.mu.Lock()
	rep.conflicts = slices.Clone(r.conflicts)
	rep.Samples = slices.Clone(r.samples)
	r.mu.Unlock()
	seen := map[int64]bool{}
	for _, a := range rep.conflicts {
		seen[a.user] = true
	}
	rep.UsersConflicting = int64(len(seen))
	return rep
}

// OrdersByUser returns, for every user answered 200 or 202, the distinct
// order ids those answers named (one, unless the service contradicted
// itself). This is the input of the checker's "no lost order", "no phantom
// order" and "one order id per user" checks.
func (r *Report) OrdersByUser() map[int64][]int64 {
	m := make(map[int64][]int64, r.UsersWithOrder)
	for i := range r.users {
		if o := r.users[i].order.Load(); o != 0 {
			m[r.cfg.userID(i)] = []int64{o}
		}
	}
	for _, a := range r.conflicts {
		if !slices.Contains(m[a.user], a.order) {
			m[a.user] = append(m[a.user], a.order)
		}
	}
	return m
}

// UncertainUsers returns the users with at least one request of unknown
// outcome (timeout, transport error, 5xx, unexpected reply), in ascending
// order: an order of theirs that nobody was told about is explained.
func (r *Report) UncertainUsers() []int64 {
	var out []int64
	for i := range r.users {
		if r.users[i].uncertain.Load() != 0 {
			out = append(out, r.cfg.userID(i))
		}
	}
	slices.Sort(out) // UserIDs need not ascend
	return out
}

// WriteTable prints the report as an aligned text table.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	n := func(v int64) string { return strconv.FormatInt(v, 10) }
	row("target", fmt.Sprintf("%s (activity %d)", r.Target, r.ActivityID))
	row("crowd", fmt.Sprintf("%d users, %d connections, %.0f%% repeat clicks", r.Users, r.Concurrency, r.RepeatShare*100))
	if r.Rate > 0 {
		row("rate limit", fmt.Sprintf("%.0f req/s", r.Rate))
	}
	row("requests", fmt.Sprintf("%d in %s = %.0f req/s", r.Requests, r.Elapsed.Round(time.Millisecond), r.Throughput))
	c := r.Counts
	for _, kv := range []struct {
		k string
		v int64
	}{
		{"  accepted (202)", c.Accepted}, {"  already (200)", c.Already}, {"  sold out (409)", c.SoldOut},
		{"  not started (403)", c.NotStarted}, {"  ended (403)", c.Ended}, {"  not found (404)", c.NotFound},
		{"  invalid (400)", c.Invalid}, {"  unavailable (503)", c.Unavailable}, {"  outcome unknown (504)", c.Unknown}, {"  other", c.Other},
		{"  transport errors", c.Errors}, {"  timeouts", c.Timeouts},
	} {
		if kv.v > 0 || kv.k == "  accepted (202)" {
			row(kv.k, n(kv.v))
		}
	}
	l := r.Latency
	d := func(v time.Duration) string { return fmtDuration(v) }
	row("latency", fmt.Sprintf("p50 %s  p95 %s  p99 %s  p99.9 %s  max %s  mean %s",
		d(l.P50), d(l.P95), d(l.P99), d(l.P999), d(l.Max), d(l.Mean)))
	if c.Accepted > 0 {
		row("first accepted", "+"+d(r.FirstAccepted))
		row("last accepted", "+"+d(r.LastAccepted))
	}
	if r.FirstSoldOut > 0 || c.SoldOut > 0 {
		row("first sold out", "+"+d(r.FirstSoldOut))
		row("sell-out time", d(r.SellOut))
		row("sold out too early", fmt.Sprintf("%d of %d sold-out answers came before a grab that was still sold a unit (%.3f%%)",
			r.SoldOutEarly, c.SoldOut, 100*float64(r.SoldOutEarly)/float64(max(c.SoldOut, 1))))
	}
	row("users", fmt.Sprintf("%d clicked, %d with an order, %d told two order ids, %d uncertain",
		r.UsersClicked, r.UsersWithOrder, r.UsersConflicting, r.UsersUncertain))
	for _, s := range r.Samples {
		row("sample", s)
	}
	return tw.Flush()
}

// fmtDuration prints d with about three significant digits.
func fmtDuration(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return strconv.FormatFloat(float64(d)/float64(time.Microsecond), 'f', 0, 64) + "µs"
	case d < time.Second:
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 2, 64) + "ms"
	}
	return strconv.FormatFloat(d.Seconds(), 'f', 3, 64) + "s"
}
