package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/seckilldev/seckill/loadgen"
)

// The load generators of bench --baseline. The Go generator (loadgen)
// costs about as much CPU per request as the service, and on a small
// machine the two share the cores, which pulls every ratio toward 1; wrk,
// a C generator, costs far less per request, and anyone can repeat its
// runs with the same command line.
const (
	generatorAuto = "auto" // wrk if it is on PATH, else go
	generatorWrk  = "wrk"
	generatorGo   = "go"
)

var errNoWrk = errors.New("--generator wrk: wrk is not on PATH; install it (Debian/Ubuntu: apt-get install wrk; macOS: brew install wrk), or pass --generator go")

const goGeneratorWarning = "warning: the Go generator runs in this process and shares the CPUs with the service and the baseline, at a cost per request close to the service's: its ratios run higher than wrk's. For figures to compare, install wrk (apt-get install wrk), which --generator auto (the default) picks."

// pickGenerator resolves --generator for --baseline, before anything
// starts, and refuses the flags that only the Go generator takes.
func (c *benchConfig) pickGenerator(set map[string]bool) error {
	_, noWrk := exec.LookPath("wrk")
	if c.generator == generatorAuto {
		c.generator = generatorGo
		if noWrk == nil {
			c.generator = generatorWrk
		}
	}
	if c.generator != generatorWrk {
		return nil
	}
	for _, f := range []string{"requests", "users", "repeat"} {
		if set[f] {
			return usagef("--%s shapes the Go generator's crowd; wrk runs for --duration with a new user per request (pass --generator go to keep --%s)", f, f)
		}
	}
	if noWrk != nil {
		return notStarted(errNoWrk)
	}
	if _, inEnv := os.LookupEnv(envName("duration")); !set["duration"] && !inEnv {
		c.duration = wrkRunLength
	}
	return nil
}

const (
	// wrkRunLength is a run's length unless --duration says otherwise:
	// long enough for a steady rate, short enough for the 8 runs of a
	// bench to take about a minute.
	wrkRunLength = 8 * time.Second
	// wrkRounds baseline runs alternate with as many grab runs in each
	// scenario, so that a drift of the machine (another process, a
	// thermal limit) affects both sides alike; the medians are reported.
	wrkRounds = 2
)

// wrkScript is the Lua script wrk runs: POST PATH, every request as a new
// buyer. It has no response() hook on purpose: with one, wrk hands every
// answer's headers and body to Lua, which costs the generator CPU that the
// service would otherwise get; the answers are checked on the service's
// /metrics and by wrk's count of statuses >= 400 instead.
const wrkScript = `-- seckill bench --baseline: wrk -s THIS URL -- PATH FIRST_USER_ID
-- Each request is POST PATH with X-User-ID FIRST_USER_ID, FIRST_USER_ID+1, ...
-- (ids below 1e14, which tostring writes in full); run with -t1, as each
-- thread counts from FIRST_USER_ID.
local path, user
function init(args)
  path = args[1]
  user = tonumber(args[2])
end
function request()
  local id = user
  user = user + 1
  return wrk.format("POST", path, {["X-User-ID"] = tostring(id)}, nil)
end
`

// wrkBench runs the wrk side of bench --baseline.
type wrkBench struct {
	target, baseURL string
	adminToken      string // reads /metrics
	connections     int
	seconds         int
	script          string // path of wrkScript on disk
	stride          int64  // user ids per run
	runs            int64  // runs so far, which places the next run's ids
	noMetrics       bool   // /metrics could not be read: said once
	say             func(string, ...any)
}

// runBaselineWrk measures both scenarios of bench --baseline with wrk
// against the service at c.target and the baseline server at baseURL.
func runBaselineWrk(ctx context.Context, c benchConfig, baseURL string, stdout, stderr io.Writer) error {
	say := func(format string, args ...any) { fmt.Fprintf(stderr, format+"\n", args...) }
	f, err := os.CreateTemp("", "seckill-bench-*.lua")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := io.WriteString(f, wrkScript); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	// wrk takes whole seconds.
	secs := max(1, int(math.Ceil(c.duration.Seconds())))
	w := &wrkBench{target: c.target, baseURL: baseURL, adminToken: c.adminToken, connections: c.concurrency, seconds: secs,
		script: f.Name(), say: say,
		// A wrk thread sends far fewer than a million requests a second,
		// so no run reaches the ids of the next one.
		stride: int64(max(secs, 10)) * 1_000_000}

	var out []scenario
	failed := int64(0)
	// 1. Every grab succeeds: a stock nobody can exhaust, every user new.
	id, err := createSale(ctx, c.target, c.adminToken, 100_000_000, time.Now().Add(-time.Second), 0, c.buckets, "")
	if err != nil {
		return err
	}
	s, n, err := w.scenario(ctx, "every grab succeeds", succeedsTarget(c), id, "accepted", http.StatusAccepted)
	if err != nil {
		return err
	}
	out, failed = append(out, s), failed+n

	// 2. After the sell-out: the common case of a real sale. Sold out
	// before the measure, by one buyer outside the runs' ids.
	id, err = createSale(ctx, c.target, c.adminToken, 1, time.Now().Add(-time.Second), 0, c.buckets, "")
	if err != nil {
		return err
	}
	if err := grabOnce(ctx, c.target, id, 1); err != nil {
		return fmt.Errorf("sell out activity %d: %w", id, err)
	}
	s, n, err = w.scenario(ctx, "after the sell-out", targetSoldOut, id, "sold_out", http.StatusConflict)
	if err != nil {
		return err
	}
	out, failed = append(out, s), failed+n

	if c.jsonOut {
		if err := writeJSON(stdout, benchResult{Scenarios: out, Generator: generatorWrk, OK: failed == 0}); err != nil {
			return err
		}
	} else {
		writeBaselineTable(stdout, out)
		fmt.Fprintf(stdout, "\ngenerator: wrk -t1 -c%d -d%ds --latency, %d baseline runs alternating with %d grab runs per scenario, medians; wrk, service, Redis and baseline share this machine (%d CPUs)\n",
			c.concurrency, secs, wrkRounds, wrkRounds, numCPU())
	}
	if failed > 0 {
		return fmt.Errorf("%d requests failed or got an unexpected answer (see above)", failed)
	}
	return nil
}

// scenario alternates baseline and grab runs on activity, whose grabs
// should all answer status (outcome on /metrics). It returns the number
// of requests that failed or got another answer, having said so.
func (w *wrkBench) scenario(ctx context.Context, name string, target float64, activity int64, outcome string, status int) (scenario, int64, error) {
	path := fmt.Sprintf("/api/v1/activities/%d/grab", activity)
	var grabs, bases []wrkRun
	var baseBad, grabBad, failed int64
	for round := 1; round <= wrkRounds; round++ {
		w.say("%s: baseline, run %d of %d...", name, round, wrkRounds)
		b, err := w.run(ctx, w.baseURL+"/hello", "")
		if err != nil {
			return scenario{}, 0, err
		}
		if bad := b.Status; bad > 0 || b.socketErrors() > 0 {
			w.say("%s: baseline run %d: %d answers were not 200%s", name, round, bad, b.describeErrors())
			baseBad += bad
			failed += bad + b.socketErrors()
		}
		bases = append(bases, b)

		w.say("%s: grab, run %d of %d...", name, round, wrkRounds)
		before, mErr := readGrabTally(ctx, w.target, w.adminToken)
		g, err := w.run(ctx, w.target, path)
		if err != nil {
			return scenario{}, 0, err
		}
		after, aErr := settledGrabTally(ctx, w.target, w.adminToken)
		// wrk tells the answers >= 400 from the others; /metrics tells
		// which outcome each grab had.
		bad := g.Status
		if status >= 400 {
			bad = g.Requests - g.Status
		}
		var detail string
		if err := errors.Join(mErr, aErr); err != nil {
			if !w.noMetrics {
				w.say("warning: %v: the answers are checked by wrk's count of statuses >= 400 alone", err)
				w.noMetrics = true
			}
		} else {
			var m int64
			m, detail = after.unexpected(before, outcome)
			bad = max(bad, m)
		}
		if bad > 0 || g.socketErrors() > 0 {
			w.say("%s: grab run %d: %d answers were not %d %s (%s)%s", name, round, bad, status, outcome,
				cmp.Or(detail, "by wrk's count"), g.describeErrors())
			grabBad += bad
			failed += bad + g.socketErrors()
		}
		grabs = append(grabs, g)
	}
	sc := scenario{Name: name, Target: target,
		Grab:     wrkReport(w.target, activity, w.connections, grabs, status, grabBad),
		Baseline: wrkReport(w.baseURL+"/hello", 0, w.connections, bases, http.StatusOK, baseBad)}
	for i := range grabs {
		sc.GrabRuns = append(sc.GrabRuns, grabs[i].Rate)
		sc.BaselineRuns = append(sc.BaselineRuns, bases[i].Rate)
	}
	sc.Ratio = loadgen.Ratio(sc.Grab, sc.Baseline)
	return sc, failed, nil
}

// run runs wrk once on url: with a path, it POSTs grabs to path with ids of
// users never seen; without, it GETs url as it is (the baseline, measured
// as ../shared/perf/wrk-grab.sh measures it: no script).
func (w *wrkBench) run(ctx context.Context, url, path string) (wrkRun, error) {
	w.runs++
	args := []string{"-t1", "-c" + strconv.Itoa(w.connections), "-d" + strconv.Itoa(w.seconds) + "s", "--latency", url}
	if path != "" {
		args = append(args[:len(args)-1], "-s", w.script, url, "--", path, strconv.FormatInt(w.runs*w.stride, 10))
	}
	// The command line, for anyone who wants to repeat a run by hand.
	w.say("  wrk %s", strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, "wrk", args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return wrkRun{}, fmt.Errorf("wrk: %w: %s%s", err, out, stderr.String())
	}
	r, err := parseWrk(string(out))
	if err != nil {
		return wrkRun{}, fmt.Errorf("wrk: %w in its output:\n%s%s", err, out, stderr.String())
	}
	w.say("  %.0f req/s, p50 %s, p99 %s", r.Rate, r.P50, r.P99)
	return r, nil
}

// wrkRun is what one wrk run printed.
type wrkRun struct {
	Requests  int64         // answers received
	Elapsed   time.Duration // the run's length
	Rate      float64       // Requests/sec
	Mean, Max time.Duration // latency (Thread Stats)
	P50, P99  time.Duration // latency (--latency)
	Status    int64         // answers with a status >= 400 (wrk's "Non-2xx or 3xx responses")
	// Socket errors: no answer.
	Connect, Read, Write, Timeout int64
}

func (r wrkRun) socketErrors() int64 { return r.Connect + r.Read + r.Write + r.Timeout }

// describeErrors is "; socket errors: ..." if there were some, else "".
func (r wrkRun) describeErrors() string {
	if r.socketErrors() == 0 {
		return ""
	}
	return fmt.Sprintf("; socket errors (no answer): connect %d, read %d, write %d, timeout %d", r.Connect, r.Read, r.Write, r.Timeout)
}

var (
	wrkRequests = regexp.MustCompile(`(?m)^\s*(\d+) requests in (\S+),`)
	wrkRate     = regexp.MustCompile(`(?m)^Requests/sec:\s*([0-9.]+)\s*$`)
	wrkLatency  = regexp.MustCompile(`(?m)^\s*Latency\s+([0-9.]+[a-z]+)\s+\S+\s+([0-9.]+[a-z]+)\s`)
	// wrk prints "50%", wrk2 "50.000%".
	wrkP50     = regexp.MustCompile(`(?m)^\s*50(?:\.0+)?%\s+(\S+)\s*$`)
	wrkP99     = regexp.MustCompile(`(?m)^\s*99(?:\.0+)?%\s+(\S+)\s*$`)
	wrkStatus  = regexp.MustCompile(`(?m)^\s*Non-2xx or 3xx responses:\s*(\d+)\s*$`)
	wrkSockets = regexp.MustCompile(`(?m)^\s*Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)\s*$`)
)

// parseWrk reads the report of `wrk --latency`. The lines on statuses and
// socket errors appear only when there were some.
func parseWrk(out string) (wrkRun, error) {
	var r wrkRun
	var err error
	find := func(re *regexp.Regexp, what string) []string {
		m := re.FindStringSubmatch(out)
		if m == nil && err == nil {
			err = fmt.Errorf("no %s", what)
		}
		return m
	}
	dur := func(s string) time.Duration {
		d, e := parseWrkDuration(s)
		if e != nil && err == nil {
			err = e
		}
		return d
	}
	if m := find(wrkRequests, "request count"); m != nil {
		r.Requests, _ = strconv.ParseInt(m[1], 10, 64)
		r.Elapsed = dur(m[2])
	}
	if m := find(wrkRate, "Requests/sec"); m != nil {
		r.Rate, _ = strconv.ParseFloat(m[1], 64)
	}
	if m := find(wrkLatency, "latency statistics"); m != nil {
		r.Mean, r.Max = dur(m[1]), dur(m[2])
	}
	if m := find(wrkP50, "50% latency (run with --latency)"); m != nil {
		r.P50 = dur(m[1])
	}
	if m := find(wrkP99, "99% latency (run with --latency)"); m != nil {
		r.P99 = dur(m[1])
	}
	if err != nil {
		return wrkRun{}, err
	}
	if m := wrkStatus.FindStringSubmatch(out); m != nil {
		r.Status, _ = strconv.ParseInt(m[1], 10, 64)
	}
	if m := wrkSockets.FindStringSubmatch(out); m != nil {
		n := make([]int64, 4)
		for i := range n {
			n[i], _ = strconv.ParseInt(m[i+1], 10, 64)
		}
		r.Connect, r.Read, r.Write, r.Timeout = n[0], n[1], n[2], n[3]
	}
	if r.Requests == 0 || r.Rate <= 0 {
		return wrkRun{}, fmt.Errorf("no request answered")
	}
	return r, nil
}

// parseWrkDuration reads a time as wrk prints it: a number with two
// decimals and a unit, us, ms, s, m or h.
func parseWrkDuration(s string) (time.Duration, error) {
	i := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i <= 0 {
		return 0, fmt.Errorf("time %q: no number", s)
	}
	v, err := strconv.ParseFloat(s[:i], 64)
	if err != nil {
		return 0, fmt.Errorf("time %q: %w", s, err)
	}
	unit := map[string]time.Duration{"us": time.Microsecond, "ms": time.Millisecond, "s": time.Second,
		"m": time.Minute, "h": time.Hour}[s[i:]]
	if unit == 0 {
		return 0, fmt.Errorf("time %q: unknown unit", s)
	}
	return time.Duration(math.Round(v * float64(unit))), nil
}

// wrkReport sums up a scenario's runs of one side as the Go generator's
// report would: Requests and Elapsed add up the runs, while Throughput
// and the latencies are the runs' medians (Max their maximum); wrk prints
// no 95th or 99.9th percentile, which stay zero. bad answers did not
// have status.
func wrkReport(url string, activity int64, connections int, runs []wrkRun, status int, bad int64) *loadgen.Report {
	rep := &loadgen.Report{Target: url, ActivityID: activity, Concurrency: connections, Status: map[int]int64{}}
	var rates, means, p50s, p99s []float64
	for _, r := range runs {
		rep.Requests += r.Requests
		rep.Elapsed += r.Elapsed
		rep.Counts.Errors += r.Connect + r.Read + r.Write
		rep.Counts.Timeouts += r.Timeout
		rep.Latency.Max = max(rep.Latency.Max, r.Max)
		rates = append(rates, r.Rate)
		means = append(means, float64(r.Mean))
		p50s = append(p50s, float64(r.P50))
		p99s = append(p99s, float64(r.P99))
	}
	// Every request is a new user.
	rep.Users = int(rep.Requests)
	rep.Throughput = median(rates)
	rep.Latency.Count = rep.Requests
	rep.Latency.Mean = time.Duration(median(means))
	rep.Latency.P50 = time.Duration(median(p50s))
	rep.Latency.P99 = time.Duration(median(p99s))
	good := rep.Requests - min(bad, rep.Requests)
	rep.Counts.Other = rep.Requests - good
	rep.Status[status] = good
	switch status {
	case http.StatusAccepted:
		rep.Counts.Accepted = good
	case http.StatusConflict:
		rep.Counts.SoldOut = good
	}
	return rep
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// grabTally is a reading of the service's grab counters on /metrics.
type grabTally struct {
	outcomes map[string]float64 // seckill_grabs_total, by outcome
	answered float64            // answers on the grab route, any status
}

// readMetrics reads the metrics of the service at base (its /metrics
// takes the admin token).
func readMetrics(ctx context.Context, base, adminToken string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("read /metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("read /metrics: HTTP %d", resp.StatusCode)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("read /metrics: %w", err)
	}
	return families, nil
}

// counterBy sums the counter name of families by the values of its label.
func counterBy(families map[string]*dto.MetricFamily, name, label string) map[string]float64 {
	sums := map[string]float64{}
	if f := families[name]; f != nil {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label {
					sums[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sums
}

// readGrabTally reads the grab counters of the service at base.
func readGrabTally(ctx context.Context, base, adminToken string) (grabTally, error) {
	families, err := readMetrics(ctx, base, adminToken)
	if err != nil {
		return grabTally{}, err
	}
	t := grabTally{outcomes: counterBy(families, "seckill_grabs_total", "outcome")}
	f := families["seckill_http_request_seconds"]
	if f == nil {
		return grabTally{}, fmt.Errorf("read /metrics: no seckill_http_request_seconds")
	}
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "route" && l.GetValue() == "grab" {
				t.answered += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return t, nil
}

// settledGrabTally reads the grab counters once they stop moving: when
// wrk stops, the service still answers the requests in flight, and one
// reading of /metrics gathers the counters and the histogram at different
// instants, so a grab between the two would look like a refusal.
func settledGrabTally(ctx context.Context, base, adminToken string) (grabTally, error) {
	last, err := readGrabTally(ctx, base, adminToken)
	if err != nil {
		return grabTally{}, err
	}
	// Two seconds at most: a service with traffic of its own never
	// settles, and its last reading is then the best there is.
	for range 100 {
		select {
		case <-ctx.Done():
			return grabTally{}, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		t, err := readGrabTally(ctx, base, adminToken)
		if err != nil {
			return grabTally{}, err
		}
		if t.equal(last) {
			return t, nil
		}
		last = t
	}
	return last, nil
}

func (t grabTally) equal(u grabTally) bool {
	return t.answered == u.answered && maps.Equal(t.outcomes, u.outcomes)
}

// unexpected counts the grabs between before and t whose outcome was not
// want, and says what they were. A grab refused before the sale saw it
// (a limit, an overload) has no outcome, only an answer. The outcome is
// counted inside the handler, the answer after it, so a grab in flight
// while t was read can hide one refusal; never make one up.
func (t grabTally) unexpected(before grabTally, want string) (int64, string) {
	var n, outcomes float64
	var parts []string
	for o, v := range t.outcomes {
		d := v - before.outcomes[o]
		outcomes += d
		if o != want && d > 0 {
			n += d
			parts = append(parts, fmt.Sprintf("%s %.0f", o, d))
		}
	}
	slices.Sort(parts)
	if refused := t.answered - before.answered - outcomes; refused > 0 {
		n += refused
		parts = append(parts, fmt.Sprintf("refused before the sale %.0f", refused))
	}
	if len(parts) == 0 {
		return 0, ""
	}
	return int64(n), "/metrics: " + strings.Join(parts, ", ")
}

// grabOnce grabs activity as user and expects a new order.
func grabOnce(ctx context.Context, base string, activity, user int64) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, fmt.Sprintf("%s/api/v1/activities/%d/grab", base, activity), nil)
	if err != nil {
		return err
	}
	req.Header.Set("X-User-ID", strconv.FormatInt(user, 10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("grab: HTTP %d %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return nil
}
