package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"

	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/stock"
)

// TestServeDrain: SIGTERM to a `seckill serve` process while a crowd of
// keep-alive clients grabs. The process exits 0; every request either got an
// HTTP answer or failed with a transport error, and for none of the latter
// did the server act (no order, no buyer mark); every accepted order is in
// the database and none is left unread or unacknowledged in the stream.
//
// With --drain-idle longer than the test, the drain waits for every crowd
// connection's next request, so the test can also ask for the clean close
// without depending on timing: each client's last answer says Connection:
// close, and its one transport error is the refused dial that follows.
func TestServeDrain(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs processes")
	}
	redisAddr := testenv.RedisAddr(t)
	dbURL := testenv.PostgresURL(t)
	prefix := testenv.Prefix(t)
	const (
		clients  = 64
		stockN   = 10_000_000 // never sold out: every processed grab is an order
		termFrom = 2000       // SIGTERM once this many grabs were answered
	)
	addr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	base := "http://" + addr
	p := startProc(t, "serve", "--listen", addr, "--admin-token", testAdminToken, "--log-level", "info",
		"--drain-idle", "1h", "--redis", "redis://"+redisAddr, "--db", dbURL, "--redis-prefix", prefix)
	waitHTTP(t, base+"/healthz")
	in := &instance{t: t, url: base, token: testAdminToken, client: &http.Client{}}
	id := in.createActivity(stockN, 0)
	// Only the crowd's connections stay open: the drain waits for none other.
	http.DefaultClient.CloseIdleConnections()
	in.client.CloseIdleConnections()
	grabURL := fmt.Sprintf("%s/api/v1/activities/%d/grab", base, id)
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	ctx := context.Background()
	k := stock.KeysFor(prefix, id)

	type failure struct {
		uid       int64
		err       error
		lastClose bool // the client's answer before this error said Connection: close
	}
	var (
		nextUID    atomic.Int64
		termSent   atomic.Bool
		answered   atomic.Int64
		mu         sync.Mutex
		orders     = map[int64]int64{} // order id -> user, of every 202
		statuses   = map[int]int{}
		bad        int      // answers other than a 202 with an order id
		unexpected []string // samples of them
		saidClose  int      // answers with Connection: close
		failures   []failure
		beforeTerm int // transport errors before SIGTERM was sent
		terminate  sync.Once
	)
	var backlog string // of the stream when SIGTERM was sent, for the log
	sigterm := func() {
		terminate.Do(func() {
			if g, err := rdb.XInfoGroups(ctx, k.Orders).Result(); err == nil && len(g) > 0 {
				backlog = fmt.Sprintf("lag %d, pending %d", g[0].Lag, g[0].Pending)
			}
			termSent.Store(true)
			p.signal(syscall.SIGTERM)
		})
	}
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A client of its own: one keep-alive connection per goroutine.
			c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
			defer c.CloseIdleConnections()
			lastClose := false
			for {
				uid := nextUID.Add(1)
				req, _ := http.NewRequest("POST", grabURL, nil)
				req.Header.Set("X-User-ID", strconv.FormatInt(uid, 10))
				resp, err := c.Do(req)
				if err != nil {
					after := termSent.Load()
					mu.Lock()
					failures = append(failures, failure{uid, err, lastClose})
					if !after {
						beforeTerm++
					}
					mu.Unlock()
					return // the server is going or gone
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				mu.Lock()
				statuses[resp.StatusCode]++
				if lastClose = resp.Close; lastClose {
					saidClose++
				}
				oid, ok := orderID(body)
				switch {
				case err == nil && resp.StatusCode == http.StatusAccepted && ok:
					orders[oid] = uid
				case len(unexpected) < 5:
					unexpected = append(unexpected, fmt.Sprintf("user %d: %d %q %v", uid, resp.StatusCode, body, err))
					fallthrough
				default:
					bad++
				}
				mu.Unlock()
				if answered.Add(1) == termFrom {
					sigterm()
				}
			}
		}()
	}
	wg.Wait()
	sigterm() // in case the crowd stopped early, a failure reported below
	select {
	case <-p.done:
	case <-time.After(2 * time.Minute): // a hang, not a measurement
		t.Fatal("serve still running 2 minutes after SIGTERM")
	}
	if p.err != nil {
		t.Errorf("serve after SIGTERM: %v, want exit 0", p.err)
	}

	var refused, unwarned int
	other := map[string]int{}
	failedUsers := make([]int64, 0, len(failures))
	for _, f := range failures {
		failedUsers = append(failedUsers, f.uid)
		if errors.Is(f.err, syscall.ECONNREFUSED) {
			refused++
		} else {
			other[strings.TrimPrefix(f.err.Error(), "Post \""+grabURL+"\": ")]++
		}
		if !f.lastClose {
			unwarned++
		}
	}
	t.Logf("%d requests: %d answered %v (%d with Connection: close), %d transport errors (%d refused dials, %d before SIGTERM, others %v)",
		answered.Load()+int64(len(failures)), answered.Load(), statuses, saidClose, len(failures), refused, beforeTerm, other)
	if beforeTerm > 0 {
		t.Errorf("%d transport errors before SIGTERM", beforeTerm)
	}
	if bad > 0 {
		t.Errorf("%d answers were not a 202 with an order id, such as %q", bad, unexpected)
	}
	if refused != len(failures) || len(failures) != clients || unwarned > 0 {
		t.Errorf("not a clean close: %d transport errors for %d clients, %d of them a refused dial, %d after an answer without Connection: close; want %d, %d, 0",
			len(failures), clients, refused, unwarned, clients, clients)
	}

	// The database: every accepted order, for its user; nothing else.
	db, err := sqlDB(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT id, user_id, status FROM orders WHERE activity_id = $1`, id)
	if err != nil {
		t.Fatal(err)
	}
	inDB := map[int64]int64{}
	dbStatus := map[string]int{}
	for rows.Next() {
		var oid, uid int64
		var status string
		if err := rows.Scan(&oid, &uid, &status); err != nil {
			t.Fatal(err)
		}
		inDB[oid] = uid
		dbStatus[status]++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	missing := 0
	for oid, uid := range orders {
		if got, ok := inDB[oid]; !ok || got != uid {
			if missing++; missing <= 5 {
				t.Errorf("accepted order %d of user %d: in the database %v, for user %d", oid, uid, ok, got)
			}
		}
	}
	for oid, uid := range inDB {
		if _, ok := orders[oid]; !ok {
			t.Errorf("order %d of user %d is in the database, but its user got no 202", oid, uid)
		}
	}
	t.Logf("database: %d orders %v; %d accepted orders missing", len(inDB), dbStatus, missing)
	if dbStatus["confirmed"] != len(orders) {
		t.Errorf("confirmed orders: %d, want %d (one per 202)", dbStatus["confirmed"], len(orders))
	}

	// Redis: no trace of the failed requests; the stream read and
	// acknowledged to its end.
	if len(failedUsers) > 0 {
		fields := make([]string, len(failedUsers))
		for i, u := range failedUsers {
			fields[i] = strconv.FormatInt(u, 10)
		}
		marks, err := rdb.HMGet(ctx, k.Buyers, fields...).Result()
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range marks {
			if m != nil {
				t.Errorf("user %d got a transport error, yet Redis records them as the buyer of order %v", failedUsers[i], m)
			}
		}
	}
	groups, err := rdb.XInfoGroups(ctx, k.Orders).Result()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, g := range groups {
		if g.Name != stock.Group {
			continue
		}
		found = true
		unread, err := rdb.XRange(ctx, k.Orders, "("+g.LastDeliveredID, "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("stream %s, group %s: at SIGTERM %s; after exit lag %d, pending %d, %d entries after the last delivered",
			k.Orders, g.Name, backlog, g.Lag, g.Pending, len(unread))
		if g.Pending != 0 || g.Lag > 0 || len(unread) > 0 {
			t.Errorf("accepted orders left in the stream after exit: pending %d, lag %d, unread %d; want 0", g.Pending, g.Lag, len(unread))
		}
	}
	if !found {
		t.Errorf("stream %s has no group %q: %+v", k.Orders, stock.Group, groups)
	}
}

// orderID parses the order id of a grab's answer.
func orderID(body []byte) (int64, bool) {
	_, rest, ok := strings.Cut(string(body), `"order_id":"`)
	if !ok {
		return 0, false
	}
	s, _, _ := strings.Cut(rest, `"`)
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// TestDrainLameDuck: a keep-alive connection idle when the drain begins has
// its next request answered, with Connection: close; a request in flight is
// answered; new connections are refused; the drain then ends cleanly.
func TestDrainLameDuck(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	var d drainer
	srv := &fasthttp.Server{ConnState: d.connState, Handler: d.handler(func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Path()) == "/slow" {
			entered <- struct{}{}
			<-release
		}
		ctx.WriteString("ok")
	})}
	serveDone := make(chan error, 1)
	go func() { serveDone <- srv.Serve(ln) }()

	idle, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	rd := bufio.NewReader(idle)
	get := func(path string) *http.Response {
		t.Helper()
		if _, err := fmt.Fprintf(idle, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(rd, nil)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	if resp := get("/"); resp.Close {
		t.Fatal("answer before the drain says Connection: close")
	}
	slow := make(chan *http.Response, 1)
	go func() {
		resp, err := http.Get("http://" + ln.Addr().String() + "/slow")
		if err != nil {
			t.Errorf("request in flight: %v", err)
			resp = nil
		} else {
			resp.Body.Close()
		}
		slow <- resp
	}()
	<-entered

	drained := make(chan error, 1)
	go func() {
		drained <- d.drain(srv, ln, serveDone, time.Hour, time.Hour, slog.New(slog.DiscardHandler))
	}()
	for !d.lameDuck.Load() {
		time.Sleep(time.Millisecond)
	}
	if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		c.Close()
		t.Error("a new connection was accepted in the lame duck")
	}
	if resp := get("/"); !resp.Close || resp.StatusCode != http.StatusOK {
		t.Errorf("next request on the idle connection: %d, close %v; want 200 with Connection: close", resp.StatusCode, resp.Close)
	}
	if n, err := rd.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("after the last answer: read %d bytes, %v; want EOF", n, err)
	}
	close(release)
	if resp := <-slow; resp != nil && resp.StatusCode != http.StatusOK {
		t.Errorf("request in flight: %d", resp.StatusCode)
	}
	if err := <-drained; err != nil {
		t.Errorf("drain: %v", err)
	}
}

// TestDrainTimeout: a request still running when the drain timeout ends is
// cut, and the drain says so.
func TestDrainTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	entered := make(chan struct{})
	var d drainer
	srv := &fasthttp.Server{ConnState: d.connState, Handler: d.handler(func(ctx *fasthttp.RequestCtx) {
		close(entered)
		<-release
	})}
	serveDone := make(chan error, 1)
	go func() { serveDone <- srv.Serve(ln) }()
	got := make(chan error, 1)
	go func() {
		resp, err := http.Get("http://" + ln.Addr().String() + "/")
		if err == nil {
			resp.Body.Close()
		}
		got <- err
	}()
	<-entered
	err = d.drain(srv, ln, serveDone, 10*time.Millisecond, time.Second, slog.New(slog.DiscardHandler))
	close(release)
	if err == nil || !strings.Contains(err.Error(), "--drain-timeout") {
		t.Errorf("drain: %v, want an error naming --drain-timeout", err)
	}
	if err := <-got; err == nil {
		t.Error("the cut request got an answer")
	}
}

func TestDrainFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  string
		want string
	}{
		{[]string{"--drain-timeout", "-1s"}, "", "--drain-timeout: -1s is negative"},
		{[]string{"--drain-idle", "-5ms"}, "", "--drain-idle: -5ms is negative"},
		{nil, "-2s", "--drain-timeout: -2s is negative"},
	} {
		if tc.env != "" {
			t.Setenv("SECKILL_DRAIN_TIMEOUT", tc.env)
		}
		serveRefuses(t, tc.args, tc.env, tc.want)
	}
}

func TestDescribeDB(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ url, want string }{
		{"sqlite://seckill.db", "SQLite file " + filepath.Join(wd, "seckill.db")},
		{"sqlite:///var/lib/seckill/s%20k.db?_pragma=synchronous(NORMAL)", "SQLite file /var/lib/seckill/s k.db"},
		{"sqlite://:memory:", "SQLite in memory (gone when serve stops)"},
		{"postgres://app:hunter2@db:5432/shop", "postgres://app:xxxxx@db:5432/shop"},
		{"mysql://root@127.0.0.1:3306/test", "mysql://root@127.0.0.1:3306/test"},
	} {
		if got := describeDB(tc.url); got != tc.want {
			t.Errorf("describeDB(%q) = %q, want %q", tc.url, got, tc.want)
		}
	}
}

// TestDrainClaim: the drain closes a quiet connection only if no request
// arrived on it first, and a request that arrives once the drain claimed
// the connection (just before the close) is not handled: its client gets
// no answer, and the server did not act on it.
func TestDrainClaim(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var handled atomic.Int64
	var d drainer
	srv := &fasthttp.Server{ConnState: d.connState, Handler: d.handler(func(ctx *fasthttp.RequestCtx) {
		handled.Add(1)
		ctx.WriteString("ok")
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Shutdown()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rd := bufio.NewReader(c)
	get := func() *http.Response {
		t.Helper()
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(rd, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	get()
	var ci *connInfo
	for ci == nil || fasthttp.ConnState(ci.state.Load()) != fasthttp.StateIdle {
		d.conns.Range(func(_, v any) bool { ci = v.(*connInfo); return false })
		time.Sleep(time.Millisecond)
	}
	d.lameDuck.Store(true)
	if ci.claim(ci.since.Load() - 1) {
		t.Fatal("claimed a connection idle for less than asked")
	}
	// A request arrives just as the drain claims the connection, and
	// before it closes it.
	if !ci.claim(time.Now().UnixNano()) {
		t.Fatal("an idle connection could not be claimed")
	}
	if resp := get(); handled.Load() != 1 || !resp.Close {
		t.Errorf("a request on a claimed connection: handled %d times, close %v; want it not handled, and the connection closed", handled.Load()-1, resp.Close)
	}
	if ci.claim(time.Now().UnixNano()) {
		t.Error("a connection whose request arrived was claimed again")
	}
}
