package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckilldev/seckill/internal/testenv"
)

// instance is a `seckill serve` running inside the test process, on real
// servers.
type instance struct {
	t      testing.TB
	url    string
	token  string
	prefix string
	client *http.Client
}

// testAdminToken is the --admin-token of the serve processes the tests
// start: serve refuses one below 16 bytes, and warns below 32.
const testAdminToken = "test-admin-token-0123456789abcdef"

type backend struct {
	name     string
	redisURL string
	dbURL    string
}

// startServe runs `seckill serve` with the given backends until the test ends.
func startServe(t testing.TB, be backend, prefix string, extra ...string) *instance {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	in := &instance{t: t, token: "admintoken-" + testenv.RandHex(16), prefix: prefix,
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 256}}}
	c := serveConfig{listen: "127.0.0.1:0", adminToken: in.token,
		backend: backendFlags{redisURL: be.redisURL, dbURL: be.dbURL, prefix: prefix},
		worker:  workerFlags{batch: 100, claimIdle: time.Second},
		logs:    logFlags{level: "warn", format: "text"},
		ready:   func(addr string) { ready <- addr }}
	for _, e := range extra {
		if e == "--no-worker" {
			c.noWorker = true
		}
		if f, ok := strings.CutPrefix(e, "--compare-results="); ok {
			c.compareResults = f
		}
		if f, ok := strings.CutPrefix(e, "--queue-work-bits="); ok {
			c.queue.work, _ = strconv.Atoi(f)
		}
	}
	logs := newTestLog(t)
	go func() { done <- runServe(ctx, c, io.Discard, logs) }()
	select {
	case addr := <-ready:
		in.url = "http://" + addr
	case err := <-done:
		cancel()
		t.Fatalf("serve did not start: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		<-done
		t.Fatal("serve did not start in 30s")
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve returned %v", err)
		}
	})
	return in
}

// testLog is a test's log for goroutines that may outlive the test (a
// process's output, a service's background work): what they write once
// the test's cleanups registered after it have run is dropped, since a
// test's log written after the test ended panics. It is also a Writer,
// a line of log per write.
type testLog struct {
	t      testing.TB
	mu     sync.Mutex
	closed bool
}

// newTestLog returns t's log, closed by a cleanup: it runs after the
// cleanups registered later (those that stop what writes to it).
func newTestLog(t testing.TB) *testLog {
	l := &testLog{t: t}
	t.Cleanup(func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.closed = true
	})
	return l
}

func (l *testLog) Logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.t.Logf(format, args...)
	}
}

func (l *testLog) Write(p []byte) (int, error) {
	l.Logf("%s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

type reply struct {
	status int
	body   map[string]any
}

func (r reply) code() string {
	if e, ok := r.body["error"].(map[string]any); ok {
		s, _ := e["code"].(string)
		return s
	}
	return ""
}

func (in *instance) do(method, path string, headers map[string]string, body string) reply {
	in.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, in.url+path, rd)
	if err != nil {
		in.t.Fatal(err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := in.client.Do(req)
	if err != nil {
		in.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	r := reply{status: resp.StatusCode, body: map[string]any{}}
	if len(b) > 0 && resp.Header.Get("Content-Type") == "application/json" {
		if err := json.Unmarshal(b, &r.body); err != nil {
			in.t.Fatalf("%s %s: reply is not JSON: %q", method, path, b)
		}
	} else if len(b) > 0 && method != http.MethodHead {
		in.t.Fatalf("%s %s: reply %d is not JSON: %q", method, path, resp.StatusCode, b)
	}
	return r
}

func (in *instance) admin() map[string]string {
	return map[string]string{"Authorization": "Bearer " + in.token, "Content-Type": "application/json"}
}

func user(uid int64) map[string]string {
	return map[string]string{"X-User-ID": strconv.FormatInt(uid, 10)}
}

// createActivity creates an open sale and returns its id.
func (in *instance) createActivity(stock int64, startsIn time.Duration) int64 {
	in.t.Helper()
	return in.createBucketed(stock, startsIn, 1)
}

// createBucketed creates an open sale of buckets buckets and returns its id.
func (in *instance) createBucketed(stock int64, startsIn time.Duration, buckets int) int64 {
	in.t.Helper()
	now := time.Now()
	body := fmt.Sprintf(`{"name":"e2e","stock":%d,"starts_at":%q,"ends_at":%q,"buckets":%d}`, stock,
		now.Add(startsIn).Format(time.RFC3339Nano), now.Add(startsIn+time.Hour).Format(time.RFC3339Nano), buckets)
	r := in.do("POST", "/api/v1/activities", in.admin(), body)
	if r.status != http.StatusCreated || r.body["buckets"] != float64(buckets) {
		in.t.Fatalf("create activity of %d buckets: %d %v", buckets, r.status, r.body)
	}
	return int64(r.body["id"].(float64))
}

func (in *instance) grab(id, uid int64) reply {
	return in.do("POST", fmt.Sprintf("/api/v1/activities/%d/grab", id), user(uid), "")
}

// waitOrders polls every order until none is pending, and returns their
// statuses.
func (in *instance) waitOrders(orders map[string]int64) map[string]string {
	in.t.Helper()
	statuses := map[string]string{}
	deadline := time.Now().Add(60 * time.Second)
	for oid, uid := range orders {
		for {
			r := in.do("GET", "/api/v1/orders/"+oid, user(uid), "")
			if r.status != http.StatusOK {
				in.t.Fatalf("order %s of user %d: %d %v", oid, uid, r.status, r.body)
			}
			s := r.body["status"].(string)
			if s != "pending" {
				statuses[oid] = s
				break
			}
			if time.Now().After(deadline) {
				in.t.Fatalf("order %s still pending after 60s", oid)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return statuses
}

// crowd sends one grab per (user, click) concurrently and returns the order
// ids answered per user and the count of replies per status. A click
// answered 503 unavailable or 504 outcome_unknown (Redis slow to answer on
// a loaded machine) is sent again, as the API asks of a client, up to 10
// times; statuses counts the final answers.
func (in *instance) crowd(id int64, users []int64) (map[int64]map[string]bool, map[int]int) {
	in.t.Helper()
	var mu sync.Mutex
	answered := map[int64]map[string]bool{}
	statuses := map[int]int{}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, uid := range users {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			r := in.grab(id, uid)
			for try := 0; try < 10 && (r.status == http.StatusServiceUnavailable && r.code() == "unavailable" ||
				r.status == http.StatusGatewayTimeout && r.code() == "outcome_unknown"); try++ {
				time.Sleep(50 * time.Millisecond)
				r = in.grab(id, uid)
			}
			mu.Lock()
			defer mu.Unlock()
			statuses[r.status]++
			switch r.status {
			case http.StatusAccepted, http.StatusOK:
				if answered[uid] == nil {
					answered[uid] = map[string]bool{}
				}
				answered[uid][r.body["order_id"].(string)] = true
			case http.StatusConflict:
				if r.code() != "sold_out" {
					in.t.Errorf("409 with code %q", r.code())
				}
			default:
				in.t.Errorf("grab by user %d: %d %v", uid, r.status, r.body)
			}
		}()
	}
	close(start)
	wg.Wait()
	return answered, statuses
}

func (in *instance) activity(id int64) map[string]any {
	in.t.Helper()
	r := in.do("GET", fmt.Sprintf("/api/v1/activities/%d", id), nil, "")
	if r.status != http.StatusOK {
		in.t.Fatalf("get activity: %d %v", r.status, r.body)
	}
	return r.body
}

func jsonBody(v any) string {
	var b bytes.Buffer
	_ = json.NewEncoder(&b).Encode(v)
	return b.String()
}
