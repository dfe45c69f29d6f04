package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/loadgen"
)

// TestBenchBaselineWrk runs `seckill bench --baseline` with wrk on real
// Redis and PostgreSQL, as a table and as JSON: both scenarios measured,
// on both sides, and every answer the expected one (the bench fails
// otherwise).
func TestBenchBaselineWrk(t *testing.T) {
	testenv.NeedBinary(t, "wrk") // Debian: apt-get install wrk
	redisURL := redisURL(t)
	dbURL := testenv.PostgresURL(t)
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	bench := func(t *testing.T, extra ...string) []byte {
		t.Helper()
		args := append([]string{"bench", "--baseline", "--generator", "wrk", "--no-worker", "--duration", "1s",
			"--redis", redisURL, "--db", dbURL}, extra...)
		cmd := exec.Command(bin, args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("bench %v: %v\n%s%s", args, err, out, stderr.String())
		}
		t.Logf("%s", stderr.String())
		return out
	}

	t.Run("table", func(t *testing.T) {
		out := string(bench(t))
		for _, name := range []string{"every grab succeeds", "after the sell-out"} {
			m := regexp.MustCompile(`(?m)^` + name + `\s+(\d+)\s+(\d+)\s+([0-9.]+)\s`).FindStringSubmatch(out)
			if m == nil {
				t.Errorf("no row for %q in:\n%s", name, out)
				continue
			}
			for i, what := range []string{"grab req/s", "baseline req/s", "ratio"} {
				if v, _ := strconv.ParseFloat(m[i+1], 64); v <= 0 {
					t.Errorf("%s: %s %s, want > 0", name, what, m[i+1])
				}
			}
		}
		if !strings.Contains(out, "generator: wrk -t1 -c64 -d1s --latency") {
			t.Errorf("no line naming the generator in:\n%s", out)
		}
	})

	t.Run("json", func(t *testing.T) {
		out := bench(t, "--json")
		var res benchResult
		if err := json.Unmarshal(out, &res); err != nil {
			t.Fatalf("output is not the JSON result: %v\n%s", err, out)
		}
		if !res.OK || res.Generator != "wrk" || len(res.Scenarios) != 2 {
			t.Fatalf("ok %v, generator %q, %d scenarios; want true, wrk, 2:\n%s", res.OK, res.Generator, len(res.Scenarios), out)
		}
		for i, want := range []struct {
			name   string
			status int
		}{{"every grab succeeds", http.StatusAccepted}, {"after the sell-out", http.StatusConflict}} {
			s := res.Scenarios[i]
			if s.Name != want.name || s.Ratio <= 0 || len(s.GrabRuns) != wrkRounds || len(s.BaselineRuns) != wrkRounds {
				t.Errorf("scenario %d: %q, ratio %v, %d and %d runs; want %q, > 0, %d runs each", i, s.Name, s.Ratio,
					len(s.GrabRuns), len(s.BaselineRuns), want.name, wrkRounds)
			}
			for side, r := range map[string]struct {
				rep    *loadgen.Report
				status int
			}{"grab": {s.Grab, want.status}, "baseline": {s.Baseline, http.StatusOK}} {
				rep := r.rep
				if rep == nil {
					t.Errorf("%s: no %s report", s.Name, side)
					continue
				}
				if l := rep.Latency; rep.Throughput <= 0 || l.P50 <= 0 || l.P99 < l.P50 {
					t.Errorf("%s, %s: %.0f req/s, p50 %v, p99 %v", s.Name, side, rep.Throughput, l.P50, l.P99)
				}
				failed := rep.Counts.Other + rep.Counts.Errors + rep.Counts.Timeouts
				if rep.Requests <= 0 || rep.Status[r.status] != rep.Requests || failed != 0 {
					t.Errorf("%s, %s: %d requests, statuses %v, %d failed; want every one %d",
						s.Name, side, rep.Requests, rep.Status, failed, r.status)
				}
			}
		}
	})
}

// TestBenchBaselineWrkRefused: answers other than the expected ones fail
// the bench, which says what they were. The service limits requests per
// address, and wrk sends them all from one.
func TestBenchBaselineWrkRefused(t *testing.T) {
	testenv.NeedBinary(t, "wrk")
	addr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	startProc(t, "serve", "--no-worker", "--listen", addr, "--admin-token", testAdminToken, "--ip-rate", "50",
		"--redis", redisURL(t), "--db", testenv.PostgresURL(t), "--redis-prefix", testenv.Prefix(t))
	waitHTTP(t, "http://"+addr+"/healthz")
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "bench", "--baseline", "--generator", "wrk", "--duration", "1s",
		"--target", "http://"+addr, "--admin-token", testAdminToken)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	t.Logf("%s", stderr.String())
	if err == nil || !strings.Contains(stderr.String(), "answers were not 202 accepted (/metrics: refused before the sale") {
		t.Errorf("bench: %v; want a failure naming the refusals\n%s%s", err, out, stderr.String())
	}
}

// TestBenchGeneratorFlags: bad uses of --generator are refused, naming the
// flag, before anything starts; wrk missing is an error that says how to
// install it.
func TestBenchGeneratorFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		path string // PATH, if not the test's
		code int
		want string
	}{
		{[]string{"--baseline", "--generator", "fast"}, "", 2, `--generator: "fast" is not one of auto, wrk, go`},
		{[]string{"--generator", "go"}, "", 2, "--generator chooses the load generator of --baseline"},
		{[]string{"--baseline", "--generator", "wrk", "--requests", "100"}, "", 2, "--requests shapes the Go generator's crowd"},
		{[]string{"--baseline", "--generator", "wrk", "--repeat", "0"}, "", 2, "--repeat shapes the Go generator's crowd"},
		{[]string{"--baseline", "--generator", "wrk"}, t.TempDir(), 2, "wrk is not on PATH; install it (Debian/Ubuntu: apt-get install wrk"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			if tc.path != "" {
				t.Setenv("PATH", tc.path)
			}
			// Were the value let through, the bench would stop at once.
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			var stderr strings.Builder
			code := run(ctx, append([]string{"bench"}, tc.args...), io.Discard, &stderr)
			if code != tc.code || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("bench %v: exit %d, %q; want %d and %q", tc.args, code, stderr.String(), tc.code, tc.want)
			}
		})
	}

	t.Run("auto", func(t *testing.T) {
		_, err := exec.LookPath("wrk")
		want, dur := "go", time.Minute
		if err == nil {
			want, dur = "wrk", wrkRunLength
		}
		c := benchConfig{generator: "auto", duration: time.Minute}
		if err := c.pickGenerator(map[string]bool{}); err != nil || c.generator != want || c.duration != dur {
			t.Errorf("auto: %q, %v, %v; want %q, %v", c.generator, c.duration, err, want, dur)
		}
		t.Setenv("PATH", t.TempDir())
		c = benchConfig{generator: "auto", duration: time.Minute}
		if err := c.pickGenerator(map[string]bool{}); err != nil || c.generator != "go" || c.duration != time.Minute {
			t.Errorf("auto without wrk: %q, %v, %v; want go, 1m", c.generator, c.duration, err)
		}
	})
}

func TestParseWrk(t *testing.T) {
	const clean = `Running 8s test @ http://127.0.0.1:40000
  1 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     2.31ms    1.23ms   1.02s    80.00%
    Req/Sec    27.61k     2.01k   31.00k    72.50%
  Latency Distribution
     50%  834.00us
     75%    2.59ms
     90%    3.39ms
     99%    6.52ms
  220503 requests in 8.01s, 32.46MB read
Requests/sec:  27528.46
Transfer/sec:      4.05MB
`
	got, err := parseWrk(clean)
	want := wrkRun{Requests: 220503, Elapsed: 8010 * time.Millisecond, Rate: 27528.46, Mean: 2310 * time.Microsecond,
		Max: 1020 * time.Millisecond, P50: 834 * time.Microsecond, P99: 6520 * time.Microsecond}
	if err != nil || got != want {
		t.Errorf("clean run: got %+v, %v; want %+v", got, err, want)
	}

	errs := strings.Replace(clean, "Requests/sec", `  Socket errors: connect 1, read 2, write 3, timeout 4
  Non-2xx or 3xx responses: 220503
Requests/sec`, 1)
	got, err = parseWrk(errs)
	want.Connect, want.Read, want.Write, want.Timeout, want.Status = 1, 2, 3, 4, 220503
	if err != nil || got != want {
		t.Errorf("run with errors: got %+v, %v; want %+v", got, err, want)
	}

	// wrk2 prints its percentiles with three decimals.
	wrk2 := strings.NewReplacer("     50%", " 50.000%", "     99%", " 99.000%").Replace(clean)
	if got, err := parseWrk(wrk2); err != nil || got.P50 != 834*time.Microsecond || got.P99 != 6520*time.Microsecond {
		t.Errorf("wrk2: got %+v, %v", got, err)
	}

	for _, bad := range []struct{ name, out, want string }{
		{"without --latency", regexp.MustCompile(`(?s)  Latency Distribution.*99%[^\n]*\n`).ReplaceAllString(clean, ""), "no 50% latency"},
		{"unknown unit", strings.Replace(clean, "6.52ms", "6.52ns", 1), `time "6.52ns": unknown unit`},
		{"nothing answered", strings.NewReplacer("220503 requests", "0 requests", "27528.46", "0.00").Replace(clean), "no request answered"},
		{"not wrk", "unable to connect to 127.0.0.1:1 Connection refused\n", "no request count"},
	} {
		if got, err := parseWrk(bad.out); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: got %+v, %v; want an error with %q", bad.name, got, err, bad.want)
		}
	}

	for _, tc := range []struct {
		in   string
		want time.Duration
	}{{"0.00us", 0}, {"834.00us", 834 * time.Microsecond}, {"1.50ms", 1500 * time.Microsecond},
		{"2.00s", 2 * time.Second}, {"1.50m", 90 * time.Second}, {"1.00h", time.Hour}} {
		if got, err := parseWrkDuration(tc.in); err != nil || got != tc.want {
			t.Errorf("parseWrkDuration(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{4, 2}, 3}, {[]float64{5, 1, 3}, 3}} {
		if got := median(tc.in); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// TestSucceedsTarget: "every grab succeeds" is held to issue 13's goal of
// the service measured: 0.45x with its worker (self-hosted without
// --no-worker), 0.70x for the API tier alone and for a --target, whose
// worker the bench cannot see.
func TestSucceedsTarget(t *testing.T) {
	for _, tc := range []struct {
		c    benchConfig
		want float64
	}{
		{benchConfig{selfHosted: true}, 0.45},
		{benchConfig{selfHosted: true, noWorker: true}, 0.70},
		{benchConfig{}, 0.70},
	} {
		if got := succeedsTarget(tc.c); got != tc.want {
			t.Errorf("self-hosted %v, no worker %v: target %v, want %v", tc.c.selfHosted, tc.c.noWorker, got, tc.want)
		}
	}
}
