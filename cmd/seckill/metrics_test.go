package main

import (
	"context"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill/internal/testenv"
)

// TestMetricsAccess: the API's /metrics takes the admin token, while
// --metrics-listen serves them without one; --ip-rate covers every route a
// stranger reaches (the probes, the dashboard and paths that do not exist
// too), and never the admin.
func TestMetricsAccess(t *testing.T) {
	metrics := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	// The test's requests come from addresses of their own, through
	// 127.0.0.1 as a trusted proxy: the harness' polls of /healthz count
	// for 127.0.0.1.
	h := serveProcess(t, testenv.RedisAddr(t), testenv.PostgresURL(t), testenv.Prefix(t), "--no-worker",
		"--metrics-listen", metrics, "--ip-rate", "0.01", "--ip-burst", "2", "--trusted-proxies", "127.0.0.1")
	if r := h.do("GET", "/metrics", map[string]string{"X-Forwarded-For": "3.0.0.1"}, ""); r.status != 401 || r.code() != "unauthorized" {
		t.Errorf("/metrics without the token: %d %v, want 401 unauthorized", r.status, r.body)
	}
	for range 5 { // the admin is not limited
		if body := metricsPage(t, h.url, h.token); !strings.Contains(body, "seckill_http_request_seconds") {
			t.Fatalf("/metrics with the token: no API metrics in %.300s", body)
		}
	}
	if body := metricsPage(t, "http://"+metrics, ""); !strings.Contains(body, "seckill_http_request_seconds") || !strings.Contains(body, "go_goroutines") {
		t.Errorf("--metrics-listen: %.300s, want serve's metrics", body)
	}
	resp, err := http.Post("http://"+metrics+"/metrics", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 {
		t.Errorf("POST on --metrics-listen: %d, want 405", resp.StatusCode)
	}

	for i, path := range []string{"/healthz", "/metrics", "/dashboard/", "/dashboard/app/dashboard.js", "/no/such/path", "/api/v1/openapi.json"} {
		ip := "4.0.0." + strconv.Itoa(i+1)
		for n := 1; n <= 3; n++ {
			req, _ := http.NewRequest("GET", h.url+path, nil)
			req.Header.Set("X-Forwarded-For", ip)
			resp, err := h.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			limited := resp.StatusCode == 429 && strings.Contains(string(b), `"rate_limited"`)
			if n <= 2 && limited || n == 3 && !limited {
				t.Errorf("GET %s, request %d from one address (burst 2): %d %.200s", path, n, resp.StatusCode, b)
			}
		}
	}
}

// TestMetricsScrapeShared: scrapes as fast as a client sends them read
// each live sale's state in Redis at most once a second (stock.Observer),
// however many there are: counted on a Redis of the test's own.
func TestMetricsScrapeShared(t *testing.T) {
	rs := testenv.StartRedis(t)
	h := serveProcess(t, rs.Addr, testenv.PostgresURL(t), testenv.Prefix(t), "--no-worker")
	const sales = 3
	for range sales {
		id := h.createActivity(100, 0)
		h.grab(id, 1)
	}
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr})
	defer rdb.Close()
	xlen := func() int64 {
		info, err := rdb.InfoMap(context.Background(), "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		// calls=N,usec=...
		v := info["Commandstats"]["cmdstat_xlen"]
		calls, _, _ := strings.Cut(strings.TrimPrefix(v, "calls="), ",")
		n, _ := strconv.ParseInt(calls, 10, 64)
		return n
	}
	before := xlen()
	began := time.Now()
	const scrapes = 50
	for range scrapes {
		if body := metricsPage(t, h.url, h.token); !strings.Contains(body, "seckill_redis_remaining") {
			t.Fatalf("no seckill_redis_remaining in %.300s", body)
		}
	}
	took := time.Since(began)
	reads := xlen() - before
	// One read of each sale per second begun, and one more for a read
	// in flight at the start.
	most := sales * (int64(math.Ceil(took.Seconds())) + 1)
	t.Logf("%d scrapes in %v: %d XLEN (one a sale a read), at most %d allowed", scrapes, took.Round(time.Millisecond), reads, most)
	if reads > most {
		t.Errorf("%d scrapes in %v read the sales' streams %d times, want at most %d", scrapes, took, reads, most)
	}
}

// TestSlowGatherer: the live registry is gathered at each call, the slow
// one at most once per interval; the families come out sorted, each once.
func TestSlowGatherer(t *testing.T) {
	live, slow := prometheus.NewRegistry(), prometheus.NewRegistry()
	hits := prometheus.NewCounter(prometheus.CounterOpts{Name: "b_hits_total"})
	live.MustRegister(hits)
	var gathered atomic.Int64
	slow.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "a_slow"}, func() float64 { return float64(gathered.Add(1)) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "c_slow"}, func() float64 { return 1 }))
	g := &slowGatherer{live: live, slow: slow, every: time.Hour}
	for i := range 3 {
		hits.Inc()
		mfs, err := g.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, mf := range mfs {
			names = append(names, mf.GetName())
		}
		if strings.Join(names, " ") != "a_slow b_hits_total c_slow" {
			t.Fatalf("families %v", names)
		}
		if v := mfs[1].GetMetric()[0].GetCounter().GetValue(); v != float64(i+1) {
			t.Errorf("gathering %d: the live counter says %v, want %d", i+1, v, i+1)
		}
		if v := mfs[0].GetMetric()[0].GetGauge().GetValue(); v != 1 {
			t.Errorf("gathering %d: the slow gauge was gathered %v times, want once", i+1, v)
		}
	}
	g.every = 0
	if mfs, _ := g.Gather(); mfs[0].GetMetric()[0].GetGauge().GetValue() != 2 {
		t.Error("past the interval, the slow registry was not gathered again")
	}
}

// metricsPage reads /metrics at base, with the admin token unless it is "".
func metricsPage(t *testing.T, base, token string) string {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/metrics", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s/metrics: %d %.300s", base, resp.StatusCode, b)
	}
	return string(b)
}
