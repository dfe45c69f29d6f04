package loadgen_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckilldev/seckill/loadgen"
)

// clients runs a test with each of the generator's HTTP clients.
var clients = []struct {
	name    string
	netHTTP bool
}{{"raw", false}, {"net/http", true}}

func baselineServer(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(loadgen.BaselineHandler))
	t.Cleanup(srv.Close)
	return srv
}

func TestBaselineCountsAddUp(t *testing.T) {
	srv := baselineServer(t)
	for _, c := range clients {
		t.Run(c.name, func(t *testing.T) {
			rep, err := loadgen.Run(context.Background(), loadgen.Config{
				URL: srv.URL, ActivityID: 7, Users: 2000, FirstUserID: 1000, RepeatShare: 0.3,
				Concurrency: 16, NetHTTP: c.netHTTP,
			})
			if err != nil {
				t.Fatal(err)
			}
			// Default bound: every user clicks once, plus 30% repeats.
			const want = 2858 // ceil(2000 / 0.7)
			if rep.Requests != want || rep.Counts.Total() != want || rep.Counts.Accepted != want {
				t.Fatalf("requests %d, counted %d, accepted %d; want %d each\n%+v",
					rep.Requests, rep.Counts.Total(), rep.Counts.Accepted, want, rep.Counts)
			}
			if rep.Status[202] != want {
				t.Errorf("status counts %v, want 202: %d", rep.Status, want)
			}
			if rep.UsersClicked != 2000 || rep.UsersWithOrder != 2000 || rep.UsersConflicting != 0 || rep.UsersUncertain != 0 {
				t.Errorf("users: clicked %d, with order %d, conflicting %d, uncertain %d; want 2000, 2000, 0, 0",
					rep.UsersClicked, rep.UsersWithOrder, rep.UsersConflicting, rep.UsersUncertain)
			}
			// The baseline names the user id as the order id.
			byUser := rep.OrdersByUser()
			if len(byUser) != 2000 {
				t.Fatalf("OrdersByUser has %d users, want 2000", len(byUser))
			}
			for uid, oids := range byUser {
				if uid < 1000 || uid >= 3000 || len(oids) != 1 || oids[0] != uid {
					t.Fatalf("user %d: orders %v, want [%d]", uid, oids, uid)
				}
			}
			if u := rep.UncertainUsers(); len(u) != 0 {
				t.Errorf("uncertain users %v, want none", u)
			}
			checkLatency(t, rep, want)
			if rep.Throughput <= 0 || rep.Elapsed <= 0 {
				t.Errorf("throughput %f over %s", rep.Throughput, rep.Elapsed)
			}
		})
	}
}

func checkLatency(t *testing.T, rep *loadgen.Report, count int64) {
	t.Helper()
	l := rep.Latency
	if l.Count != count {
		t.Errorf("latency count %d, want %d", l.Count, count)
	}
	if !(0 < l.P50 && l.P50 <= l.P95 && l.P95 <= l.P99 && l.P99 <= l.P999 && l.P999 <= l.Max) {
		t.Errorf("percentiles out of order: %+v", l)
	}
	if l.Max > rep.Elapsed+time.Millisecond || l.Mean <= 0 || l.Mean > l.Max {
		t.Errorf("latency %+v does not fit a run of %s", l, rep.Elapsed)
	}
}

func TestDurationBound(t *testing.T) {
	srv := baselineServer(t)
	for _, c := range clients {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			rep, err := loadgen.Run(context.Background(), loadgen.Config{
				URL: srv.URL, ActivityID: 1, Users: 100, Duration: 300 * time.Millisecond,
				Concurrency: 4, NetHTTP: c.netHTTP,
			})
			if err != nil {
				t.Fatal(err)
			}
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("run took %s, want about 300ms", took)
			}
			if rep.Elapsed < 300*time.Millisecond || rep.Elapsed > time.Second {
				t.Errorf("elapsed %s, want just over 300ms", rep.Elapsed)
			}
			if rep.Requests < 10 || rep.Counts.Total() != rep.Requests {
				t.Errorf("requests %d, counted %d", rep.Requests, rep.Counts.Total())
			}
			// 100 users and many more requests: the rest are repeats.
			if rep.UsersClicked != 100 {
				t.Errorf("users clicked %d, want 100", rep.UsersClicked)
			}
		})
	}
}

// sale is a small in-memory stand-in for the service's grab endpoint, to
// give the generator every kind of answer.
type sale struct {
	mu        sync.Mutex
	remaining int
	startsAt  time.Time
	buyers    map[int64]int64
	nextOrder int64
	firstGrab time.Time
	grabs     int
}

func newSale(stock int, startsAt time.Time) *sale {
	return &sale{remaining: stock, startsAt: startsAt, buyers: map[int64]int64{}, nextOrder: 1 << 40}
}

func (s *sale) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if r.Method == http.MethodGet {
		s.mu.Lock()
		defer s.mu.Unlock()
		fmt.Fprintf(w, `{"id":1,"name":"sale","remaining":%d}`, s.remaining)
		return
	}
	uid, err := strconv.ParseInt(r.Header.Get("X-User-ID"), 10, 64)
	if err != nil || uid <= 0 {
		w.WriteHeader(400)
		fmt.Fprint(w, `{"error":{"code":"invalid_argument","message":"bad user"}}`)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.grabs++
	if s.firstGrab.IsZero() {
		s.firstGrab = time.Now()
	}
	switch oid, ok := s.buyers[uid]; {
	case time.Now().Before(s.startsAt):
		w.WriteHeader(403)
		fmt.Fprint(w, `{"error":{"code":"not_started","message":"the sale has not started"}}`)
	case ok:
		w.WriteHeader(200)
		fmt.Fprintf(w, `{"order_id":"%d","status":"pending"}`, oid)
	case s.remaining == 0:
		w.WriteHeader(409)
		fmt.Fprint(w, `{"error":{"code":"sold_out","message":"sold out"}}`)
	default:
		s.remaining--
		s.nextOrder++
		s.buyers[uid] = s.nextOrder
		w.WriteHeader(202)
		fmt.Fprintf(w, `{"order_id":"%d","status":"pending"}`, s.nextOrder)
	}
}

func TestSaleOutcomes(t *testing.T) {
	for _, c := range clients {
		t.Run(c.name, func(t *testing.T) {
			s := newSale(100, time.Time{})
			srv := httptest.NewServer(s)
			defer srv.Close()
			var progress []loadgen.Progress
			rep, err := loadgen.Run(context.Background(), loadgen.Config{
				URL: srv.URL, ActivityID: 1, Users: 1000, RepeatShare: 0.2, Concurrency: 32,
				NetHTTP: c.netHTTP, WatchRemaining: true, ProgressInterval: 10 * time.Millisecond,
				Progress: func(p loadgen.Progress) { progress = append(progress, p) },
			})
			if err != nil {
				t.Fatal(err)
			}
			cn := rep.Counts
			if cn.Accepted != 100 || cn.Accepted+cn.Already+cn.SoldOut != rep.Requests || cn.Total() != rep.Requests {
				t.Fatalf("counts %+v of %d requests: want 100 accepted, the rest already or sold out", cn, rep.Requests)
			}
			if cn.SoldOut == 0 || rep.FirstSoldOut < rep.FirstAccepted || rep.SellOut <= 0 ||
				rep.SellOut != rep.FirstSoldOut-rep.FirstAccepted || rep.LastAccepted < rep.FirstAccepted {
				t.Errorf("sell-out times: first accepted %s, last %s, first sold out %s, sell-out %s",
					rep.FirstAccepted, rep.LastAccepted, rep.FirstSoldOut, rep.SellOut)
			}
			byUser := rep.OrdersByUser()
			if len(byUser) != 100 || rep.UsersWithOrder != 100 {
				t.Fatalf("%d users with orders, want 100", len(byUser))
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			for uid, oids := range byUser {
				if len(oids) != 1 || s.buyers[uid] != oids[0] {
					t.Errorf("user %d told %v, holds %d", uid, oids, s.buyers[uid])
				}
			}
			if rep.UsersConflicting != 0 || rep.UsersUncertain != 0 {
				t.Errorf("conflicting %d, uncertain %d", rep.UsersConflicting, rep.UsersUncertain)
			}
			if len(progress) == 0 || !progress[len(progress)-1].Final {
				t.Fatalf("progress calls %d, want a final one", len(progress))
			}
			last := progress[len(progress)-1]
			if last.Requests != rep.Requests || last.Accepted != 100 {
				t.Errorf("final progress %+v does not match the report", last)
			}
			known := false
			for _, p := range progress {
				known = known || p.RemainingKnown
			}
			if !known {
				t.Errorf("remaining never known with WatchRemaining")
			}
		})
	}
}

func TestStartGate(t *testing.T) {
	startsAt := time.Now().Add(1500 * time.Millisecond)
	s := newSale(10, startsAt)
	srv := httptest.NewServer(s)
	defer srv.Close()

	// Without the gate, the crowd arrives too early.
	early, err := loadgen.Run(context.Background(), loadgen.Config{URL: srv.URL, ActivityID: 1, Users: 50, Concurrency: 4})
	if err != nil {
		t.Fatal(err)
	}
	if early.Counts.NotStarted != 50 {
		t.Fatalf("before the start: %+v, want 50 not_started", early.Counts)
	}
	s.mu.Lock()
	s.firstGrab = time.Time{}
	s.mu.Unlock()

	rep, err := loadgen.Run(context.Background(), loadgen.Config{
		URL: srv.URL, ActivityID: 1, Users: 50, FirstUserID: 100, Concurrency: 4, StartAt: startsAt,
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Counts.NotStarted != 0 || rep.Counts.Accepted != 10 || rep.Counts.SoldOut != 40 {
		t.Errorf("after the gate: %+v, want 10 accepted, 40 sold out", rep.Counts)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.firstGrab.Before(startsAt) {
		t.Errorf("first grab %s before the gate %s", s.firstGrab, startsAt)
	}
}

func TestTimeoutsAndErrors(t *testing.T) {
	// Every 10th user gets no answer in time; every 10th+1 has its
	// connection cut.
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		uid, _ := strconv.ParseInt(r.Header.Get("X-User-ID"), 10, 64)
		switch {
		case r.Method == http.MethodGet:
		case uid%10 == 0:
			select {
			case <-release:
			case <-time.After(5 * time.Second):
			}
		case uid%10 == 1:
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		loadgen.BaselineHandler(w, r)
	}))
	defer srv.Close()
	defer close(release)
	for _, c := range clients {
		t.Run(c.name, func(t *testing.T) {
			rep, err := loadgen.Run(context.Background(), loadgen.Config{
				URL: srv.URL, ActivityID: 1, Users: 100, Concurrency: 10, Timeout: time.Second,
				NetHTTP: c.netHTTP,
			})
			if err != nil {
				t.Fatal(err)
			}
			cn := rep.Counts
			if cn.Timeouts != 10 || cn.Errors != 10 || cn.Accepted != 80 || cn.Total() != 100 {
				t.Fatalf("counts %+v, want 10 timeouts, 10 errors, 80 accepted", cn)
			}
			if rep.Status[0] != 20 {
				t.Errorf("status %v, want 20 without a response", rep.Status)
			}
			unc := rep.UncertainUsers()
			if len(unc) != 20 || rep.UsersUncertain != 20 {
				t.Fatalf("uncertain users %v, want the 20 failed ones", unc)
			}
			for _, u := range unc {
				if u%10 > 1 {
					t.Errorf("user %d uncertain, answered fine", u)
				}
			}
			if rep.Latency.Max < time.Second || rep.Latency.Max > 3*time.Second {
				t.Errorf("max latency %s, want about the 1s timeout", rep.Latency.Max)
			}
			if len(rep.Samples) == 0 {
				t.Errorf("no samples of the errors")
			}
		})
	}
}

func TestConflictingOrderIDs(t *testing.T) {
	var n sync.Mutex
	next := int64(0)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Lock()
		next++
		oid := next
		n.Unlock()
		w.WriteHeader(202)
		fmt.Fprintf(w, `{"order_id":"%d","status":"pending"}`, oid)
	}))
	defer srv.Close()
	// As many users as connections: every repeat click is then one of all
	// the users. With more users, half the repeats are double clicks of
	// the last few users to click, and one of the others may click once
	// only (with 10 users, 1 run in 1,000 measured). Here the chance that
	// some user clicks only once in 200 requests is about 4 x 0.75^196.
	rep, err := loadgen.Run(context.Background(), loadgen.Config{
		URL: srv.URL, ActivityID: 1, Users: 4, Requests: 200, Concurrency: 4,
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.UsersConflicting != 4 {
		t.Fatalf("conflicting users %d, want all 4", rep.UsersConflicting)
	}
	total := 0
	for uid, oids := range rep.OrdersByUser() {
		if len(oids) < 2 {
			t.Errorf("user %d: %v, want several order ids", uid, oids)
		}
		total += len(oids)
	}
	if total != 200 {
		t.Errorf("%d distinct order ids recorded, want 200", total)
	}
}

// TestRawFraming feeds the raw client each way a reply can be framed.
func TestRawFraming(t *testing.T) {
	big := strings.Repeat("x", 10000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		uid, _ := strconv.ParseInt(r.Header.Get("X-User-ID"), 10, 64)
		body := fmt.Sprintf(`{"order_id":"%d","status":"pending"}`, uid)
		switch uid % 5 {
		case 0: // chunked: flushed before the end
			w.WriteHeader(202)
			fmt.Fprint(w, body[:5])
			http.NewResponseController(w).Flush()
			fmt.Fprint(w, body[5:])
		case 1: // the server closes the connection after the reply
			w.Header().Set("Connection", "close")
			w.WriteHeader(202)
			fmt.Fprint(w, body)
		case 2: // a body larger than the read buffer, the id at its head
			w.WriteHeader(202)
			fmt.Fprint(w, body[:len(body)-1]+`,"pad":"`+big+`"}`)
		case 3: // chunked and large
			w.WriteHeader(202)
			fmt.Fprint(w, body[:len(body)-1]+`,"pad":"`)
			http.NewResponseController(w).Flush()
			fmt.Fprint(w, big+`"}`)
		default:
			w.WriteHeader(202)
			fmt.Fprint(w, body)
		}
	}))
	defer srv.Close()
	rep, err := loadgen.Run(context.Background(), loadgen.Config{
		URL: srv.URL, ActivityID: 1, Users: 500, Concurrency: 8,
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Counts.Accepted != 500 {
		t.Fatalf("counts %+v, samples %q: want 500 accepted", rep.Counts, rep.Samples)
	}
	for uid, oids := range rep.OrdersByUser() {
		if len(oids) != 1 || oids[0] != uid {
			t.Fatalf("user %d: %v", uid, oids)
		}
	}
}

func TestRateLimit(t *testing.T) {
	srv := baselineServer(t)
	rep, err := loadgen.Run(context.Background(), loadgen.Config{
		URL: srv.URL, ActivityID: 1, Users: 300, Concurrency: 8, Rate: 1000,
	})
	if err != nil {
		t.Fatal(err)
	}
	// 300 requests at 1000/s: the last is due at 299ms.
	if rep.Requests != 300 || rep.Elapsed < 295*time.Millisecond || rep.Elapsed > 1500*time.Millisecond {
		t.Errorf("%d requests in %s, want 300 in about 300ms", rep.Requests, rep.Elapsed)
	}
}

func TestCancel(t *testing.T) {
	srv := baselineServer(t)
	for _, c := range clients {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			start := time.Now()
			rep, err := loadgen.Run(ctx, loadgen.Config{
				URL: srv.URL, ActivityID: 1, Duration: time.Minute, Concurrency: 4, NetHTTP: c.netHTTP,
			})
			if err != nil {
				t.Fatal(err)
			}
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("cancelled run took %s", took)
			}
			if rep.Requests == 0 || rep.Counts.Total() != rep.Requests {
				t.Errorf("requests %d, counted %d", rep.Requests, rep.Counts.Total())
			}
		})
	}
}

func TestUnreachableTarget(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nobody listens there now
	rep, err := loadgen.Run(context.Background(), loadgen.Config{
		URL: "http://" + addr, ActivityID: 1, Users: 50, Concurrency: 4,
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Counts.Errors != 50 || rep.UsersUncertain != 50 || rep.Latency.Count != 0 {
		t.Errorf("counts %+v, uncertain %d, latency %+v: want 50 errors", rep.Counts, rep.UsersUncertain, rep.Latency)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, cfg := range []loadgen.Config{
		{ActivityID: 1},
		{URL: "127.0.0.1:8080", ActivityID: 1},
		{URL: "http://127.0.0.1:8080"},
		{URL: "http://127.0.0.1:8080", ActivityID: 1, RepeatShare: 1},
		{URL: "http://127.0.0.1:8080", ActivityID: 1, Users: -1},
		{URL: "http://127.0.0.1:8080", ActivityID: 1, Duration: -time.Second},
	} {
		if _, err := loadgen.Run(context.Background(), cfg); err == nil {
			t.Errorf("Run(%+v) succeeded", cfg)
		}
	}
}

func TestReportOutput(t *testing.T) {
	srv := httptest.NewServer(newSale(5, time.Time{}))
	defer srv.Close()
	rep, err := loadgen.Run(context.Background(), loadgen.Config{URL: srv.URL, ActivityID: 1, Users: 20, Concurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"req/s", "accepted (202)", "sold out (409)", "p99", "sell-out time"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	js, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back loadgen.Report
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	if back.Counts != rep.Counts || back.Latency != rep.Latency || back.Requests != 20 || back.Status[409] != 15 {
		t.Errorf("JSON round trip: %s", js)
	}
}

func TestProgressWriter(t *testing.T) {
	var b bytes.Buffer
	print := loadgen.ProgressWriter(&b)
	print(loadgen.Progress{Elapsed: 100 * time.Millisecond, Requests: 10, Accepted: 3})
	print(loadgen.Progress{Elapsed: 200 * time.Millisecond, Requests: 20, Accepted: 3}) // within the second: skipped
	print(loadgen.Progress{Elapsed: 1200 * time.Millisecond, Requests: 30, Accepted: 3, SoldOut: 7, Remaining: 0, RemainingKnown: true})
	print(loadgen.Progress{Elapsed: 1300 * time.Millisecond, Requests: 31, Accepted: 3, SoldOut: 8, Final: true})
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 || strings.Contains(b.String(), "\r") {
		t.Fatalf("not a terminal: want 3 plain lines, got %q", b.String())
	}
	if !strings.Contains(lines[1], "sold out 7") || !strings.Contains(lines[1], "remaining 0") {
		t.Errorf("line %q", lines[1])
	}
}

func TestServeAndMeasureBaseline(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- loadgen.ServeBaseline(ctx, ln) }()

	cfg := loadgen.Config{URL: "http://unused.invalid", ActivityID: 1, Users: 1000, Concurrency: 8, StartAt: time.Now().Add(time.Hour)}
	base, err := loadgen.MeasureBaseline(context.Background(), cfg, "http://"+ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if base.Counts.Accepted != 1000 || base.Throughput <= 0 {
		t.Fatalf("baseline: %+v at %.0f/s", base.Counts, base.Throughput)
	}
	half := *base
	half.Throughput /= 2
	if r := loadgen.Ratio(&half, base); r < 0.49 || r > 0.51 {
		t.Errorf("ratio %f, want 0.5", r)
	}
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("ServeBaseline: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ServeBaseline did not stop")
	}
}

// TestSoldOutEarly: a sale that tells the odd users "sold out" while it
// still sells to the even ones, as a sale of buckets without borrowing
// would; the generator counts those answers, and none of the honest ones
// after the sell-out (each held 3 ms, so that none arrives close to the
// last sale's send). The crowd is given as UserIDs.
func TestSoldOutEarly(t *testing.T) {
	var mu sync.Mutex
	remaining, next := 50, int64(1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost { // the warm-up
			return
		}
		uid, _ := strconv.ParseInt(r.Header.Get("X-User-ID"), 10, 64)
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case remaining > 0 && uid%2 == 0:
			remaining--
			next++
			w.WriteHeader(202)
			fmt.Fprintf(w, `{"order_id":"%d","status":"pending"}`, next)
		default:
			if remaining == 0 {
				time.Sleep(3 * time.Millisecond)
			}
			w.WriteHeader(409)
			fmt.Fprint(w, `{"error":{"code":"sold_out","message":"sold out"}}`)
		}
	}))
	defer srv.Close()
	ids := make([]int64, 200)
	for i := range ids {
		ids[i] = int64(1001 + i) // 1001, 1002, ...: odd, even, ...
	}
	rep, err := loadgen.Run(context.Background(), loadgen.Config{URL: srv.URL, ActivityID: 1, UserIDs: ids, Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Counts.Accepted != 50 || rep.Counts.SoldOut != 150 {
		t.Fatalf("counts %+v, want 50 accepted and 150 sold out", rep.Counts)
	}
	// Users 1001, 1003, ..., 1099 were told sold out before 1100 bought.
	if rep.SoldOutEarly != 50 {
		t.Errorf("SoldOutEarly %d, want 50", rep.SoldOutEarly)
	}
	byUser := rep.OrdersByUser()
	if len(byUser) != 50 || len(byUser[1002]) != 1 || len(byUser[1100]) != 1 || byUser[1101] != nil {
		t.Errorf("orders by user %v: want the even users 1002..1100", byUser)
	}
	var b strings.Builder
	if err := rep.WriteTable(&b); err != nil || !strings.Contains(b.String(), "50 of 150 sold-out answers came before") {
		t.Errorf("table does not tell the early sold-out answers: %v\n%s", err, b.String())
	}
	if _, err := loadgen.Run(context.Background(), loadgen.Config{URL: srv.URL, ActivityID: 1, UserIDs: []int64{3, 3}}); err == nil {
		t.Error("UserIDs with a repeated id: no error")
	}
}
