package dashboard_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/check"
	"github.com/seckilldev/seckill/compare"
	"github.com/seckilldev/seckill/dashboard"
	"github.com/seckilldev/seckill/httpapi"
	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/sale"
	"github.com/seckilldev/seckill/stock"
	"github.com/seckilldev/seckill/store"
	"github.com/seckilldev/seckill/worker"
)

const token = "dash-admin"

// listing wraps the real store to count the activity listings the
// dashboard makes; every call goes to the database.
type listing struct {
	seckill.Store
	calls atomic.Int64
}

func (s *listing) Activities(ctx context.Context, since time.Time) ([]seckill.Activity, error) {
	s.calls.Add(1)
	return s.Store.Activities(ctx, since)
}

// rig is the service (API, worker) on real Redis and PostgreSQL, with the
// dashboard mounted as serve mounts it.
type rig struct {
	url   string
	store *listing
	svc   *sale.Service
	dbURL string
	rdb   redis.UniversalClient
	pfx   string
	stop  context.CancelFunc // ends the dashboard's streams
}

func newRig(t *testing.T, tune func(*dashboard.Config)) *rig {
	t.Helper()
	dbURL := testenv.PostgresURL(t)
	addr := testenv.RedisAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	st, err := store.Open(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	pfx := testenv.Prefix(t)
	eng := stock.New(rdb, stock.Config{Prefix: pfx})
	log := slog.New(slog.DiscardHandler)
	reg := prometheus.NewRegistry()
	ls := &listing{Store: st}
	svc := sale.New(st, eng, sale.Config{}, log, sale.NewMetrics(reg))
	api := httpapi.New(svc, token, nil, log, reg, nil)
	cfg := dashboard.Config{Store: ls, Engine: eng, Metrics: reg, IsAdmin: api.IsAdmin, DBURL: dbURL,
		Tick: 50 * time.Millisecond, Log: log}
	if tune != nil {
		tune(&cfg)
	}
	d := dashboard.New(cfg)
	w := worker.New(st, eng, worker.Config{Poll: 100 * time.Millisecond}, log, nil)
	api.Mount(dashboard.Prefix, d)
	srv := httptest.NewServer(api)
	var wg sync.WaitGroup
	dctx, stopDash := context.WithCancel(ctx)
	for _, run := range []func(){func() { d.Run(dctx) }, func() { _ = w.Run(ctx) }, func() { _ = svc.Run(ctx) }} {
		wg.Add(1)
		go func() { defer wg.Done(); run() }()
	}
	t.Cleanup(func() {
		cancel() // streams end first, or Close would wait for them
		wg.Wait()
		srv.Close()
		eng.Close()
		rdb.Close()
		st.Close()
	})
	return &rig{url: srv.URL, store: ls, svc: svc, dbURL: dbURL, rdb: rdb, pfx: pfx, stop: stopDash}
}

func (r *rig) createSale(t *testing.T, stockN int64) int64 {
	t.Helper()
	a := seckill.Activity{Name: "dash", Stock: stockN, StartsAt: time.Now().Add(-time.Second), EndsAt: time.Now().Add(time.Hour),
		PayWithin: time.Hour}
	if err := r.svc.CreateActivity(context.Background(), &a); err != nil {
		t.Fatal(err)
	}
	return a.ID
}

func do(t *testing.T, req *http.Request) (int, []byte) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (r *rig) grab(t *testing.T, id int64, user string) int {
	t.Helper()
	req, _ := http.NewRequest("POST", fmt.Sprintf("%s/api/v1/activities/%d/grab", r.url, id), nil)
	req.Header.Set("X-User-ID", user)
	code, _ := do(t, req)
	return code
}

// stream is one page's event stream: the frames it received, by time.
type stream struct {
	mu     sync.Mutex
	frames map[int64]string // frame time -> its JSON as sent
	latest dashboard.Frame
	ended  chan struct{}
	bad    error // a frame that was not JSON; reported when the test ends
}

func openStream(t *testing.T, url string) *stream {
	t.Helper()
	resp, err := http.Get(url + "/dashboard/events")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("events: HTTP %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	s := &stream{frames: map[int64]string{}, ended: make(chan struct{})}
	// The reader never touches t, which it may outlive; the test reports
	// what it found when it ends.
	t.Cleanup(func() {
		resp.Body.Close()
		<-s.ended
		if s.bad != nil {
			t.Error(s.bad)
		}
	})
	go func() {
		defer close(s.ended)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<22)
		event := ""
		for sc.Scan() {
			line := sc.Text()
			if e, ok := strings.CutPrefix(line, "event: "); ok {
				event = e
			}
			data, ok := strings.CutPrefix(line, "data: ")
			if !ok || event != "tick" {
				continue
			}
			var f dashboard.Frame
			if err := json.Unmarshal([]byte(data), &f); err != nil {
				s.bad = fmt.Errorf("a frame that is not JSON: %v: %s", err, data)
				return
			}
			s.mu.Lock()
			s.frames[f.Time], s.latest = data, f
			s.mu.Unlock()
		}
	}()
	return s
}

func (s *stream) last() dashboard.Frame {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.latest
}

// A sale watched by many pages: each page sees the stock drain to 0 in
// Redis and in the database, the outcomes counted as the API answered
// them, and the sold-out moment; every page gets the same bytes at each
// tick, computed once.
func TestDashboardFollowsASale(t *testing.T) {
	r := newRig(t, nil)
	const stockN, buyers, viewers = 20, 30, 25
	id := r.createSale(t, stockN)
	pages := make([]*stream, viewers)
	for i := range pages {
		pages[i] = openStream(t, r.url)
	}
	codes := map[int]int{}
	for u := 1; u <= buyers; u++ {
		codes[r.grab(t, id, fmt.Sprint(u))]++
	}
	codes[r.grab(t, id, "1")]++   // the first buyer again: 200, their order
	codes[r.grab(t, id, "abc")]++ // refused before the service sees it
	codes[r.grab(t, 99999, "7")]++
	if codes[202] != stockN || codes[409] != buyers-stockN || codes[200] != 1 || codes[400] != 1 || codes[404] != 1 {
		t.Fatalf("answers %v", codes)
	}

	var a dashboard.Activity
	testenv.WaitFor(t, "the dashboard shows the sale sold out and written", func() bool {
		f := pages[0].last()
		if len(f.Activities) == 0 || f.Activities[0].ID != id {
			return false
		}
		a = f.Activities[0]
		return a.RedisRemaining != nil && *a.RedisRemaining == 0 && a.DBRemaining == 0 && a.Backlog == 0 &&
			f.Grabs[dashboard.Accepted] == stockN && f.Grabs[dashboard.SoldOut] == buyers-stockN &&
			f.Grabs[dashboard.Already] == 1 && f.Grabs[dashboard.Rejected] == 2 && f.Grabs[dashboard.Errors] == 0
	})
	if a.Stock != stockN || a.Name != "dash" || a.LastGrabAt == nil || a.SoldOutAt == nil || *a.SoldOutAt != *a.LastGrabAt {
		t.Fatalf("activity %+v: want the stock, the last grab and the sold-out moment at it", a)
	}
	if at := time.UnixMilli(*a.SoldOutAt); time.Since(at) > time.Minute || at.Before(time.UnixMilli(a.StartsAt)) {
		t.Errorf("sold out at %v: not during this sale", at)
	}
	var o seckill.Order
	testenv.WaitFor(t, "the last order readable", func() bool {
		var oid int64
		fmt.Sscan(a.LastOrderID, &oid)
		var err error
		o, err = r.svc.Order(context.Background(), oid, 0)
		return err == nil && o.Status == seckill.OrderConfirmed
	})
	if o.ActivityID != id {
		t.Errorf("last order %+v is not of activity %d", o, id)
	}
	// The orders by state follow the lifecycle: the first buyer pays, the
	// second cancels (counted every 2s).
	ctx := context.Background()
	for uid, settle := range map[int64]func(oid int64) (seckill.Order, error){
		1: func(oid int64) (seckill.Order, error) { return r.svc.Pay(ctx, oid, 1, "dash-1", "") },
		2: func(oid int64) (seckill.Order, error) { return r.svc.Cancel(ctx, oid, 2) },
	} {
		orders, err := r.svc.UserOrders(ctx, uid, seckill.Cursor{}, 10)
		if err != nil || len(orders) != 1 {
			t.Fatalf("user %d's orders: %+v %v", uid, orders, err)
		}
		if _, err := settle(orders[0].ID); err != nil {
			t.Fatalf("user %d settles: %v", uid, err)
		}
	}
	testenv.WaitFor(t, "the dashboard counts one order paid and one cancelled", func() bool {
		f := pages[0].last()
		if len(f.Activities) == 0 || f.Activities[0].ID != id {
			return false
		}
		a = f.Activities[0]
		return a.States[seckill.OrderConfirmed] == stockN-2 && a.States[seckill.OrderPaid] == 1 && a.States[seckill.OrderCancelled] == 1
	})

	// One computation per tick, whatever the number of pages: the same
	// bytes reached every page, and the database was listed at most once
	// per frame.
	r.stop()
	for _, p := range pages {
		<-p.ended
	}
	common := 0
	for at, data := range pages[0].frames {
		same := true
		for _, p := range pages[1:] {
			if d, ok := p.frames[at]; ok && d != data {
				t.Fatalf("frame %d differs between pages:\n%s\n%s", at, data, d)
			} else if !ok {
				same = false
			}
		}
		if same {
			common++
		}
	}
	if common == 0 {
		t.Fatal("no frame reached every page")
	}
	if n, frames := r.store.calls.Load(), int64(len(pages[0].frames)); n > frames+1 {
		t.Errorf("%d activity listings for %d frames and %d pages: computed per page?", n, frames, viewers)
	}
}

// The admin's checker: refused without the token, a clear 4xx for a bad or
// unknown activity, and the invariants of a finished sale.
func TestCheckEndpoint(t *testing.T) {
	r := newRig(t, nil)
	id := r.createSale(t, 5)
	for u := 1; u <= 8; u++ {
		r.grab(t, id, fmt.Sprint(u))
	}
	if err := check.WaitDrained(context.Background(), r.rdb, r.pfx, id, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	get := func(path, auth string) (int, []byte) {
		req, _ := http.NewRequest("GET", r.url+path, nil)
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		return do(t, req)
	}
	for _, c := range []struct {
		path, auth string
		status     int
		code       string
	}{
		{fmt.Sprintf("/dashboard/api/check/%d", id), "", 401, seckill.EUNAUTHORIZED},
		{fmt.Sprintf("/dashboard/api/check/%d", id), "wrong", 401, seckill.EUNAUTHORIZED},
		{"/dashboard/api/check/x1", token, 400, seckill.EINVALID},
		{"/dashboard/api/check/0", token, 400, seckill.EINVALID},
		{"/dashboard/api/check/424242", token, 404, seckill.ENOTFOUND},
		{"/dashboard/nothing-here", "", 404, seckill.ENOTFOUND},
	} {
		status, body := get(c.path, c.auth)
		var e struct{ Error struct{ Code string } }
		_ = json.Unmarshal(body, &e)
		if status != c.status || e.Error.Code != c.code {
			t.Errorf("GET %s: HTTP %d %s, want %d %s", c.path, status, body, c.status, c.code)
		}
	}
	status, body := get(fmt.Sprintf("/dashboard/api/check/%d", id), token)
	var rep check.Report
	if err := json.Unmarshal(body, &rep); status != 200 || err != nil {
		t.Fatalf("check: HTTP %d %s %v", status, body, err)
	}
	if !rep.OK() || rep.Stock != 5 || rep.Sold() != 5 || rep.DBRemaining != 0 {
		t.Fatalf("report %+v: want 5 sold of 5, every invariant held", rep)
	}
	for _, name := range []string{check.NoOversell, check.NoDuplicate, check.Conservation, check.Drained} {
		if res, ok := rep.Result(name); !ok || res.Skipped || !res.Held {
			t.Errorf("%s: %+v, want held", name, res)
		}
	}
}

// The comparison's chart reads what bench --compare --results saved, and
// says what to run when there is nothing.
func TestCompareResults(t *testing.T) {
	file := filepath.Join(t.TempDir(), "compare.json")
	r := newRig(t, func(c *dashboard.Config) { c.CompareResults = file })
	get := func() (int, string) {
		req, _ := http.NewRequest("GET", r.url+"/dashboard/api/compare", nil)
		code, b := do(t, req)
		return code, string(b)
	}
	if code, body := get(); code != 404 || !strings.Contains(body, "bench --compare --results") {
		t.Errorf("no file: HTTP %d %s", code, body)
	}
	if err := os.WriteFile(file, []byte(`{"rows": []}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, body := get(); code != 404 || !strings.Contains(body, "no strategy rows") {
		t.Errorf("empty table: HTTP %d %s", code, body)
	}
	want := compare.Table{Started: time.Now().UTC().Truncate(time.Second), Rows: []compare.Row{
		{Strategy: compare.UserLock, Throughput: 15000, Rounds: []compare.Round{{Tally: compare.Tally{Stock: 100, Sold: 138, Oversold: 38}}}},
		{Strategy: compare.Lua, Safe: true, Throughput: 50000, Rounds: []compare.Round{{Tally: compare.Tally{Stock: 100, Sold: 100}}}},
	}}
	if err := want.Save(file); err != nil {
		t.Fatal(err)
	}
	code, body := get()
	var got compare.Table
	if err := json.Unmarshal([]byte(body), &got); code != 200 || err != nil {
		t.Fatalf("HTTP %d %s %v", code, body, err)
	}
	if len(got.Rows) != 2 || got.Rows[0].Rounds[0].Oversold != 38 || got.Rows[1].Throughput != 50000 || !got.Started.Equal(want.Started) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

// The page and its assets come from the binary; nothing is loaded from
// another host.
func TestAssets(t *testing.T) {
	r := newRig(t, nil)
	for path, want := range map[string]string{
		"/dashboard/":                               `id="remaining-redis"`,
		"/dashboard/app/dashboard.js":               "new EventSource(",
		"/dashboard/app/dashboard.css":              ".card",
		"/dashboard/vendor/uplot/uPlot.iife.min.js": "uPlot (v1.6.32)",
		"/dashboard/vendor/uplot/uPlot.min.css":     ".uplot",
		"/dashboard/vendor/uplot/LICENSE":           "MIT License",
	} {
		req, _ := http.NewRequest("GET", r.url+path, nil)
		code, b := do(t, req)
		if code != 200 || !strings.Contains(string(b), want) {
			t.Errorf("GET %s: HTTP %d, want a body with %q", path, code, want)
		}
		if strings.HasSuffix(path, "/") {
			for _, ref := range []string{`src="http`, `href="http`, `src="//`, `href="//`} {
				if strings.Contains(string(b), ref) {
					t.Errorf("%s loads from another host (%s)", path, ref)
				}
			}
		}
	}
	resp, err := http.Get(r.url + "/dashboard")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Request.URL.Path != "/dashboard/" {
		t.Errorf("/dashboard ended at %s, want a redirect to /dashboard/", resp.Request.URL.Path)
	}
	// The redirect carries no HTML body, and only a GET is redirected.
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, method := range []string{"GET", "POST"} {
		req, _ := http.NewRequest(method, r.url+"/dashboard", nil)
		resp, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case method == "GET" && (resp.StatusCode != http.StatusMovedPermanently || len(b) != 0 || resp.Header.Get("Location") != "/dashboard/"):
			t.Errorf("GET /dashboard: HTTP %d, Location %q, body %q; want 301 to /dashboard/ without a body", resp.StatusCode, resp.Header.Get("Location"), b)
		case method == "POST" && (resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD"):
			t.Errorf("POST /dashboard: HTTP %d (Allow %q) %s; want 405 with Allow", resp.StatusCode, resp.Header.Get("Allow"), b)
		}
	}
	// The API is still the API around the mount.
	req, _ := http.NewRequest("GET", r.url+"/dashboards", nil)
	if code, b := do(t, req); code != 404 || !strings.Contains(string(b), "no such endpoint") {
		t.Errorf("/dashboards: HTTP %d %s, want the API's 404", code, b)
	}
}

// When Run ends (serve drains), every open stream ends, and new ones are
// refused with 503; so are viewers beyond MaxViewers.
func TestStreamsEndAndLimit(t *testing.T) {
	r := newRig(t, func(c *dashboard.Config) { c.MaxViewers = 2 })
	a, b := openStream(t, r.url), openStream(t, r.url)
	resp, err := http.Get(r.url + "/dashboard/events")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || !strings.Contains(string(body), "unavailable") {
		t.Errorf("third viewer of 2: HTTP %d %s, want 503", resp.StatusCode, body)
	}
	r.stop()
	<-a.ended
	<-b.ended
	resp, err = http.Get(r.url + "/dashboard/events")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 {
		t.Errorf("after Run ended: HTTP %d, want 503", resp.StatusCode)
	}
}
