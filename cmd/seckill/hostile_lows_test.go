package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill/dashboard"
	"github.com/seckilldev/seckill/internal/testenv"
)

// The hostile-client suite, continued: the Low findings of issue 28.

// TestHostileDrainIdle: SIGTERM while 20 clients trickle the bodies of
// their requests, 50 pages watch the dashboard and 50 keep-alive
// connections sit idle. The idle connections, and the viewers' once their
// streams end, are closed within --drain-idle of the drain's start (here
// within 10 s for a --drain-idle of 1 s, on a loaded machine), while the
// slow clients are still sending: they no longer wait for the slow
// clients, whose requests may run to --read-timeout and --drain-timeout
// (60 s each here). The slow requests are still answered once their
// bodies are in, and the process then exits 0.
func TestHostileDrainIdle(t *testing.T) {
	const (
		slow, viewers, idle = 20, 50, 50
		bound               = 10 * time.Second
	)
	h := serveProcess(t, testenv.RedisAddr(t), testenv.PostgresURL(t), testenv.Prefix(t),
		"--no-worker", "--drain-idle", "1s", "--drain-timeout", "60s", "--read-timeout", "60s")
	http.DefaultClient.CloseIdleConnections() // waitHTTP's
	dial := func() net.Conn {
		t.Helper()
		c, err := net.DialTimeout("tcp", h.addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(2 * time.Minute))
		return c
	}
	// closedAt reads c until the server closes it and sends the time.
	closedAt := func(c net.Conn, r io.Reader, out chan<- time.Time) {
		_, _ = io.Copy(io.Discard, r)
		out <- time.Now()
	}

	// The slow clients create a sale each: a JSON body led by 4,000
	// spaces, sent one every 100 ms until finish closes, then the rest.
	now := time.Now()
	sale := fmt.Sprintf(`{"name":"slow","stock":1,"starts_at":%q,"ends_at":%q}`,
		now.Add(time.Hour).Format(time.RFC3339), now.Add(2*time.Hour).Format(time.RFC3339))
	body := strings.Repeat(" ", 4000) + sale
	head := fmt.Sprintf("POST /api/v1/activities HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n", h.token, len(body))
	finish := make(chan struct{})
	type answer struct {
		status int
		close  bool
		err    error
	}
	answers := make(chan answer, slow)
	var started sync.WaitGroup
	for range slow {
		c := dial()
		started.Add(1)
		go func() {
			sent := 0
			_, err := io.WriteString(c, head+body[:1])
			sent++
			started.Done()
			for err == nil {
				select {
				case <-finish:
					_, err = io.WriteString(c, body[sent:])
					if err == nil {
						var resp *http.Response
						if resp, err = http.ReadResponse(bufio.NewReader(c), nil); err == nil {
							resp.Body.Close()
							answers <- answer{status: resp.StatusCode, close: resp.Close}
							return
						}
					}
				case <-time.After(100 * time.Millisecond):
					if sent < 4000 {
						_, err = io.WriteString(c, body[sent:sent+1])
						sent++
					}
				}
			}
			answers <- answer{err: err}
		}()
	}
	started.Wait()

	viewerClosed := make(chan time.Time, viewers)
	for range viewers {
		c := dial()
		if _, err := io.WriteString(c, "GET /dashboard/events HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(c)
		resp, err := http.ReadResponse(r, nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("dashboard events: %v %v", resp, err)
		}
		if _, err := r.ReadString('\n'); err != nil { // the stream began
			t.Fatal(err)
		}
		go closedAt(c, r, viewerClosed)
	}

	idleClosed := make(chan time.Time, idle)
	for range idle {
		c := dial()
		r := bufio.NewReader(c)
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.Close {
			t.Fatal("an answer before the drain says Connection: close")
		}
		go closedAt(c, r, idleClosed)
	}

	term := time.Now()
	h.proc.signal(syscall.SIGTERM)
	wait := func(what string, n int, ch <-chan time.Time) time.Duration {
		t.Helper()
		var last time.Duration
		timeout := time.After(3 * bound)
		for i := range n {
			select {
			case at := <-ch:
				last = max(last, at.Sub(term))
			case <-timeout:
				t.Fatalf("%d of %d %s connections still open %v after SIGTERM, with the slow clients sending", n-i, n, what, 3*bound)
			}
		}
		if last > bound {
			t.Errorf("the last %s connection closed %v after SIGTERM, want within %v (--drain-idle 1s)", what, last.Round(time.Millisecond), bound)
		}
		return last
	}
	lastIdle := wait("idle", idle, idleClosed)
	lastViewer := wait("viewer", viewers, viewerClosed)
	select {
	case a := <-answers:
		t.Fatalf("a slow client ended before it finished its body: %+v", a)
	case <-h.proc.done:
		t.Fatal("serve exited with slow requests unanswered")
	default:
	}
	t.Logf("closed after SIGTERM: the idle connections within %v, the viewers within %v, the slow clients still sending",
		lastIdle.Round(time.Millisecond), lastViewer.Round(time.Millisecond))

	close(finish)
	for range slow {
		if a := <-answers; a.err != nil || a.status != http.StatusCreated || !a.close {
			t.Errorf("slow client: %+v; want 201 with Connection: close", a)
		}
	}
	select {
	case <-h.proc.done:
		if h.proc.err != nil {
			t.Errorf("serve: %v, want exit 0", h.proc.err)
		}
	case <-time.After(3 * bound):
		t.Fatalf("serve still running %v after the slow requests were answered", 3*bound)
	}
	t.Logf("exited %v after SIGTERM", time.Since(term).Round(time.Millisecond))
}

// TestHostileWeakAdminToken: an admin token below 16 bytes is refused at
// start (exit 2, naming the flag and its environment twin), one below 32
// is warned about, one of 32 or more and a generated one start silently.
func TestHostileWeakAdminToken(t *testing.T) {
	serveRefuses(t, []string{"--admin-token", "a"}, "", "--admin-token or SECKILL_ADMIN_TOKEN is 1 bytes, too short: want at least 16")
	serveRefuses(t, []string{"--admin-token", strings.Repeat("k", 15)}, "", "is 15 bytes")
	t.Setenv("SECKILL_ADMIN_TOKEN", "perf")
	serveRefuses(t, nil, "perf", "--admin-token or SECKILL_ADMIN_TOKEN is 4 bytes")
	t.Setenv("SECKILL_ADMIN_TOKEN", "")
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		args []string
		warn bool
	}{
		{[]string{"--admin-token", strings.Repeat("k", 16)}, true},
		{[]string{"--admin-token", strings.Repeat("k", 31)}, true},
		{[]string{"--admin-token", strings.Repeat("k", 32)}, false},
		{nil, false},
	} {
		// Let through, serve stops at once on the cancelled context.
		code, _, stderr := runCLI(t, cancelled, append([]string{"serve", "--listen", "127.0.0.1:0", "--db", "sqlite://:memory:"}, tc.args...)...)
		if code != exitOK || strings.Contains(stderr, "shorter than recommended") != tc.warn {
			t.Errorf("serve %v: exit %d, warned %v; want exit 0, warned %v:\n%s", tc.args, code, !tc.warn, tc.warn, stderr)
		}
	}
}

// TestHostileDashboardErrors: when Redis or the database fails, the
// dashboard's event stream tells a stranger what could not be read, and
// nothing of why (no user, database or server names, as /healthz); the
// admin's stream, with the token, tells why, without the password. Redis
// is failed by a password rotation: its WRONGPASS is named as such (it
// was `strconv.ParseInt: parsing "": invalid syntax`), then the database
// by refusing connections to it.
func TestHostileDashboardErrors(t *testing.T) {
	const password = "redis-old-password"
	srv := testenv.StartRedis(t)
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()
	if err := admin.ConfigSet(ctx, "requirepass", password).Err(); err != nil {
		t.Fatal(err)
	}
	dbURL := testenv.PostgresURL(t)
	h := serveProcess(t, ":"+password+"@"+srv.Addr, dbURL, testenv.Prefix(t), "--no-worker")
	h.createActivity(10, 0)

	stream := func(token string) <-chan dashboard.Frame {
		t.Helper()
		req, _ := http.NewRequest("GET", h.url+"/dashboard/events", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := (&http.Client{}).Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("events: %v %v", resp, err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		frames := make(chan dashboard.Frame, 1000)
		go func() {
			defer close(frames)
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(nil, 1<<20)
			for sc.Scan() {
				var f dashboard.Frame
				if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok && json.Unmarshal([]byte(data), &f) == nil {
					frames <- f
				}
			}
		}()
		return frames
	}
	public, adminFrames := stream(""), stream(h.token)
	frameText := func(f dashboard.Frame) string { b, _ := json.Marshal(f); return string(b) }
	secret := []string{password, "user=", "database=", "seckill_test_", "127.0.0.1", "WRONGPASS", "accepting", "SQLSTATE", "EOF"}
	// until returns the first frame computed at or after the time after
	// (Unix ms) whose errors mention want. Every stranger's frame on the
	// way is checked: none tells a reason.
	until := func(frames <-chan dashboard.Frame, want string, stranger bool, after int64) dashboard.Frame {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for {
			select {
			case f, ok := <-frames:
				if !ok {
					t.Fatalf("the stream ended before a frame said %q", want)
				}
				for _, s := range secret {
					if stranger && strings.Contains(frameText(f), s) {
						t.Fatalf("a stranger's frame tells %q: %s", s, frameText(f))
					}
				}
				if f.Time >= after && strings.Contains(strings.Join(f.Errors, "; "), want) {
					return f
				}
			case <-timeout:
				t.Fatalf("no frame said %q in 30s", want)
			}
		}
	}

	// Redis: a password rotation; serve's connections are dropped and come
	// back with the old password (the first reads may fail otherwise: the
	// dropped connection's EOF).
	if err := admin.ConfigSet(ctx, "requirepass", "redis-new-password").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.ClientKillByFilter(ctx, "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	f := until(adminFrames, "could not read Redis: WRONGPASS", false, 0)
	if text := frameText(f); strings.Contains(text, "ParseInt") || strings.Contains(text, password) {
		t.Errorf("the admin's frame, after a password rotation: %s; want WRONGPASS named, and no password", text)
	}
	until(public, "could not read Redis", true, f.Time)

	// The database refuses every connection.
	pg, err := sql.Open("pgx", testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	u, _ := url.Parse(dbURL)
	name := strings.TrimPrefix(u.Path, "/")
	for _, q := range []string{`ALTER DATABASE "` + name + `" ALLOW_CONNECTIONS false`,
		`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '` + name + `'`} {
		if _, err := pg.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	f = until(adminFrames, "is not currently accepting connections", false, 0)
	until(public, "could not list the activities", true, f.Time)
}

// TestHostileDashboardHeaders: every answer under /dashboard/, the page
// that takes the admin token first, forbids framing it (CSP
// frame-ancestors and X-Frame-Options), any script, style or connection
// but its own (CSP), and type sniffing. TestDashboardInBrowser holds the
// page to working under that policy.
func TestHostileDashboardHeaders(t *testing.T) {
	h := serveProcess(t, testenv.RedisAddr(t), testenv.PostgresURL(t), testenv.Prefix(t), "--no-worker")
	for _, path := range []string{"/dashboard/", "/dashboard/app/dashboard.js", "/dashboard/vendor/uplot/uPlot.min.css",
		"/dashboard/events", "/dashboard/api/compare", "/dashboard/no-such-thing", "/dashboard"} {
		resp, err := h.client.Get(h.url + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		csp := resp.Header.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'",
			"frame-ancestors 'none'", "base-uri 'none'", "form-action 'none'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("%s (%d): Content-Security-Policy %q lacks %q", path, resp.StatusCode, csp, want)
			}
		}
		if strings.Contains(csp, "unsafe") {
			t.Errorf("%s: Content-Security-Policy %q allows unsafe sources", path, csp)
		}
		for k, want := range map[string]string{"X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"} {
			if got := resp.Header.Get(k); got != want {
				t.Errorf("%s (%d): %s %q, want %q", path, resp.StatusCode, k, got, want)
			}
		}
	}
}
