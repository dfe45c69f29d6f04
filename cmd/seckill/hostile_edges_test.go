package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckilldev/seckill/internal/testenv"
)

// The strict edges of serve (issue 28): what a stranger sends that costs
// more than it should, or that a proxy in front could read otherwise.
// Each test names what it holds; the helpers are hostile_test.go's.

// zeros is an endless body.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// oversized is what TestHostileOversizedBodies sends: bodies beyond
// --max-body (64 KiB), to creating an activity (with the admin token) and
// to a grab.
var oversized = []int64{100 << 10, 4 << 20, 64 << 20}

// TestHostileOversizedBodies: a body beyond --max-body is answered 413
// too_large, every time, whatever its size, to Go's http.Client (which
// reports a write's broken pipe rather than an answer it has not taken
// yet: 33 of 40 POSTs of 4 MB did, when a refused connection closed as
// soon as it had dropped 256 KB), with Expect: 100-continue too (413 at
// once, never 100 Continue first), and to curl, with its Expect and
// without; and a refused connection costs a bound: the server reads a
// part of the body, not all of it, and closes the connection soon after
// the answer.
func TestHostileOversizedBodies(t *testing.T) {
	h := serveProcess(t, testenv.RedisAddr(t), testenv.PostgresURL(t), testenv.Prefix(t), "--no-worker")
	id := h.createActivity(100, 0)
	targets := []struct {
		name, path string
		header     http.Header
	}{
		{"create", "/api/v1/activities", http.Header{"Authorization": {"Bearer " + h.token}, "Content-Type": {"application/json"}}},
		{"grab", fmt.Sprintf("/api/v1/activities/%d/grab", id), http.Header{"X-User-Id": {"7"}, "Content-Type": {"application/json"}}},
	}
	const rounds = 40
	for _, expect := range []bool{false, true} {
		tr := &http.Transport{}
		if expect {
			tr.ExpectContinueTimeout = 10 * time.Second
		}
		client := &http.Client{Timeout: 30 * time.Second, Transport: tr}
		var continued atomic.Int64
		trace := &httptrace.ClientTrace{Got100Continue: func() { continued.Add(1) }}
		for _, size := range oversized {
			for _, tg := range targets {
				answers := map[string]int{}
				for range rounds {
					req, err := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(), trace), "POST", h.url+tg.path, io.LimitReader(zeros{}, size))
					if err != nil {
						t.Fatal(err)
					}
					req.ContentLength, req.Header = size, tg.header.Clone()
					if expect {
						req.Header.Set("Expect", "100-continue")
					}
					resp, err := client.Do(req)
					if err != nil {
						answers[err.Error()]++
						continue
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					answers[fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(b)))]++
				}
				want := `413 {"error":{"code":"too_large","message":"the request body exceeds 65536 bytes"}}`
				if answers[want] != rounds {
					t.Errorf("Go client, Expect %v, %d KB to %s: %v; want %d of %q", expect, size>>10, tg.name, answers, rounds, want)
				}
			}
		}
		if n := continued.Load(); n > 0 {
			t.Errorf("Go client, Expect %v: %d answers of 100 Continue to a body beyond the bound", expect, n)
		}
	}

	t.Run("curl", func(t *testing.T) {
		testenv.NeedBinary(t, "curl")
		const curlRounds = 10
		for _, size := range oversized {
			file := filepath.Join(t.TempDir(), "body")
			f, err := os.Create(file)
			if err == nil {
				_, err = io.Copy(f, io.LimitReader(zeros{}, size))
				err = errors.Join(err, f.Close())
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, tg := range targets {
				for _, expect := range []string{"Expect: 100-continue", "Expect:"} { // curl's own for a large body, and none
					answers := map[string]int{}
					for range curlRounds {
						args := []string{"-sS", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST", "-T", file, "-H", expect}
						for k, vs := range tg.header {
							args = append(args, "-H", k+": "+vs[0])
						}
						out, err := exec.Command("curl", append(args, h.url+tg.path)...).CombinedOutput()
						if err != nil {
							out = append(out, " "+err.Error()...)
						}
						answers[string(out)]++
					}
					if answers["413"] != curlRounds {
						t.Errorf("curl -H %q, %d KB to %s: %v; want %d of 413", expect, size>>10, tg.name, answers, curlRounds)
					}
				}
			}
		}
	})

	t.Run("cost of a refused connection", func(t *testing.T) {
		c, err := net.DialTimeout("tcp", h.addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(60 * time.Second))
		const size = 256 << 20
		var written int64
		cut := make(chan time.Time, 1) // when the server stopped taking the body
		go func() {
			defer func() { cut <- time.Now() }()
			if _, err := fmt.Fprintf(c, "POST /api/v1/activities HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", size); err != nil {
				return
			}
			buf := make([]byte, 64<<10)
			for written < size {
				n, err := c.Write(buf)
				written += int64(n)
				if err != nil {
					return
				}
			}
		}()
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		answered := time.Now()
		if resp.StatusCode != 413 {
			t.Errorf("answered %d, want 413", resp.StatusCode)
		}
		closed := (<-cut).Sub(answered)
		// The server reads at most 256 KB past the headers (the kernel's
		// buffers take a few MB more), then closes half a second after the
		// answer; a machine under load may be slower.
		if written >= 64<<20 || closed > 20*time.Second {
			t.Errorf("a refused connection took %d KB of the body and was closed %v after its answer; want far less than the 256 MB sent, and soon",
				written>>10, closed)
		}
		t.Logf("a refused 256 MB body: %d KB taken by the connection, closed %v after the answer", written>>10, closed.Round(time.Millisecond))
	})
}

// TestHostileExpect: Expect: 100-continue with a Content-Length beyond
// --max-body is answered 413 too_large at once, without 100 Continue, and
// the connection closed; one within the bound gets 100 Continue, then its
// answer.
func TestHostileExpect(t *testing.T) {
	h := serveProcess(t, testenv.RedisAddr(t), testenv.PostgresURL(t), testenv.Prefix(t), "--no-worker")
	c, err := net.DialTimeout("tcp", h.addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	resp, body, code, err := exchange(c, "POST /api/v1/activities HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+h.token+
		"\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: 1000000000\r\n\r\n")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 413 || code != "too_large" || !resp.Close {
		t.Errorf("a billion bytes expected: %d %q close=%v %s; want 413 too_large at once, closing", resp.StatusCode, code, resp.Close, body)
	}

	c2, err := net.DialTimeout("tcp", h.addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	_ = c2.SetDeadline(time.Now().Add(30 * time.Second))
	now := time.Now().UTC()
	sale := fmt.Sprintf(`{"name":"expect","stock":1,"starts_at":%q,"ends_at":%q}`, now.Format(time.RFC3339), now.Add(time.Hour).Format(time.RFC3339))
	fmt.Fprintf(c2, "POST /api/v1/activities HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n"+
		"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n", h.token, len(sale))
	br := bufio.NewReader(c2)
	if line, err := br.ReadString('\n'); err != nil || line != "HTTP/1.1 100 Continue\r\n" {
		t.Fatalf("a small body expected: %q %v; want 100 Continue", line, err)
	}
	if _, err := br.ReadString('\n'); err != nil { // the interim answer's end
		t.Fatal(err)
	}
	_, _ = io.WriteString(c2, sale)
	if r, err := http.ReadResponse(br, nil); err != nil || r.StatusCode != 201 {
		t.Errorf("a small body after 100 Continue: %v %v; want 201", r, err)
	}
}

// TestHostileRequestLines: a request of another version than HTTP/1.1 and
// HTTP/1.0 is answered 505 version_not_supported, not as HTTP/1.1; a line
// of a request's head that ends in a bare LF is answered 400 at once (the
// read-header timeout is 30 s here: fasthttp alone waited for it to send
// 408), after the requests pipelined before it; and an LF in a body is
// the body's.
func TestHostileRequestLines(t *testing.T) {
	h := serveProcess(t, testenv.RedisAddr(t), testenv.PostgresURL(t), testenv.Prefix(t),
		"--no-worker", "--read-header-timeout", "30s")
	now := time.Now().UTC()
	pretty := fmt.Sprintf("{\n  \"name\": \"pretty\",\n\n  \"stock\": 1,\n  \"starts_at\": %q,\n  \"ends_at\": %q\n}\n",
		now.Format(time.RFC3339), now.Add(time.Hour).Format(time.RFC3339))
	create := fmt.Sprintf("POST /api/v1/activities HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		h.token, len(pretty), pretty)
	const healthz = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
	for _, c := range []struct {
		name, req string
		statuses  []int
		code      string // of the last answer
	}{
		{"HTTP/2.0", "GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n", []int{505}, "version_not_supported"},
		{"HTTP/1.2", "GET /healthz HTTP/1.2\r\nHost: x\r\n\r\n", []int{505}, "version_not_supported"},
		{"HTTP/0.9", "GET /healthz HTTP/0.9\r\n\r\n", []int{505}, "version_not_supported"},
		{"HTTP/1.0", "GET /healthz HTTP/1.0\r\n\r\n", []int{200}, ""},
		{"a bare LF ending the request line", "GET /healthz HTTP/1.1\nHost: x\r\n\r\n", []int{400}, "invalid_argument"},
		{"a bare LF ending a header", "GET /healthz HTTP/1.1\r\nHost: x\nX-A: b\r\n\r\n", []int{400}, "invalid_argument"},
		{"bare LFs only", "GET /healthz HTTP/1.1\nHost: x\n\n", []int{400}, "invalid_argument"},
		{"a bare LF after a pipelined request", healthz + "GET /healthz HTTP/1.1\nHost: x\n\n", []int{200, 400}, "invalid_argument"},
		{"LFs in a body, and a request after it", create + healthz, []int{201, 200}, ""},
	} {
		conn, err := net.DialTimeout("tcp", h.addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
		go func() { _, _ = io.WriteString(conn, c.req) }()
		br := bufio.NewReader(conn)
		var got []int
		var body []byte
		for range c.statuses {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				got = append(got, 0)
				break
			}
			body, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			got = append(got, resp.StatusCode)
		}
		conn.Close()
		if fmt.Sprint(got) != fmt.Sprint(c.statuses) || (c.code != "" && !strings.Contains(string(body), `"code":"`+c.code+`"`)) {
			t.Errorf("%s: answered %v, last %s; want %v with code %q", c.name, got, body, c.statuses, c.code)
		}
	}
}

// TestHostileStrictBodies: against serve, on both of its fronts (the grab
// answered natively, the rest through net/http): a body on a request that
// takes none is refused 415 whatever its type, and what it asked is not
// done (a cancel does not cancel, a block does not block); a request
// without a body, or with Content-Length: 0 as loadgen sends, is served;
// Content-Type twice, a query parameter twice, JSON keys twice or in
// another case are 400; an encoded path is 404; blank names and names
// with bidi controls are 400, as is a sale that has ended already; the
// zero time is named out of range.
func TestHostileStrictBodies(t *testing.T) {
	dbURL := testenv.PostgresURL(t)
	h := serveProcess(t, testenv.RedisAddr(t), dbURL, testenv.Prefix(t))
	id := h.createPaid(5, time.Hour, true)
	grabPath := fmt.Sprintf("/api/v1/activities/%d/grab", id)
	g := h.grab(id, 1)
	if g.status != http.StatusAccepted {
		t.Fatalf("grab: %d %v", g.status, g.body)
	}
	oid := g.body["order_id"].(string)
	if s := h.waitOrders(map[string]int64{oid: 1})[oid]; s != "confirmed" {
		t.Fatalf("order %s: %s, want confirmed", oid, s)
	}
	now := time.Now().UTC()
	ts := func(d time.Duration) string { return now.Add(d).Format(time.RFC3339) }
	sale := func(name, starts, ends string) string {
		return `{"name":` + name + `,"stock":5,"starts_at":"` + starts + `","ends_at":"` + ends + `"}`
	}
	valid := sale(`"strict"`, ts(0), ts(time.Hour))
	admin := http.Header{"Authorization": {"Bearer " + h.token}, "Content-Type": {"application/json"}}
	buyer := func(uid int64, kv ...string) http.Header {
		hd := http.Header{"X-User-Id": {strconv.FormatInt(uid, 10)}}
		for i := 0; i+1 < len(kv); i += 2 {
			hd.Add(kv[i], kv[i+1])
		}
		return hd
	}
	for _, c := range []struct {
		name, method, path string
		header             http.Header
		body               string
		status             int
		code               string
	}{
		{"a grab with an XML body", "POST", grabPath, buyer(2, "Content-Type", "application/xml"), "<grab/>", 415, "unsupported_media_type"},
		{"a grab with a body that is not JSON", "POST", grabPath, buyer(3, "Content-Type", "application/json"), "not json", 415, "unsupported_media_type"},
		{"a grab with {}", "POST", grabPath, buyer(4, "Content-Type", "application/json"), "{}", 415, "unsupported_media_type"},
		{"a grab with two Content-Types", "POST", grabPath, buyer(5, "Content-Type", "text/plain", "Content-Type", "application/json"), "{}", 400, "invalid_argument"},
		{"a grab with a query parameter twice", "POST", grabPath + "?a=1&a=2", buyer(6), "", 400, "invalid_argument"},
		{"a grab of an encoded path", "POST", fmt.Sprintf("/api/v1/activities/%%%X%s/grab", strconv.FormatInt(id, 10)[0], strconv.FormatInt(id, 10)[1:]), buyer(7), "", 404, "not_found"},
		{"a cancel with a text body", "POST", "/api/v1/orders/" + oid + "/cancel", buyer(1, "Content-Type", "text/plain"), "hi", 415, "unsupported_media_type"},
		{"a block with a text body", "PUT", "/api/v1/blocks/999", http.Header{"Authorization": {"Bearer " + h.token}, "Content-Type": {"text/plain"}}, "hi", 415, "unsupported_media_type"},
		{"an activity with a body", "GET", fmt.Sprintf("/api/v1/activities/%d", id), http.Header{"Content-Type": {"application/json"}}, "{}", 415, "unsupported_media_type"},
		{"Content-Type twice", "POST", "/api/v1/activities", http.Header{"Authorization": {"Bearer " + h.token}, "Content-Type": {"text/plain", "application/json"}}, valid, 400, "invalid_argument"},
		{"a key twice", "POST", "/api/v1/activities", admin, strings.Replace(valid, `"stock":5`, `"stock":5,"stock":6`, 1), 400, "invalid_argument"},
		{"a key in capitals", "POST", "/api/v1/activities", admin, strings.Replace(valid, `"name"`, `"NAME"`, 1), 400, "invalid_argument"},
		{"a blank name", "POST", "/api/v1/activities", admin, sale(`"   "`, ts(0), ts(time.Hour)), 400, "invalid_argument"},
		{"a name with a bidi override", "POST", "/api/v1/activities", admin, sale(`"a\u202eb"`, ts(0), ts(time.Hour)), 400, "invalid_argument"},
		{"a sale ended already", "POST", "/api/v1/activities", admin, sale(`"past"`, ts(-2*time.Hour), ts(-time.Hour)), 400, "invalid_argument"},
		{"a query parameter twice", "GET", "/api/v1/users/me/orders?limit=1&limit=2", buyer(1), "", 400, "invalid_argument"},
		{"an encoded activity id", "GET", "/api/v1/activities/%31", nil, "", 404, "not_found"},
		{"a grab with Content-Length: 0", "POST", grabPath, buyer(8, "Content-Type", "text/plain"), "", 202, ""},
	} {
		if r := h.edgeRequest(c.method, c.path, c.header, c.body); r.status != c.status || r.code() != c.code {
			t.Errorf("%s: %d %v; want %d %q", c.name, r.status, r.body, c.status, c.code)
		}
	}
	// The zero time is named for what it is.
	if r := h.edgeRequest("POST", "/api/v1/activities", admin, sale(`"zero"`, "0001-01-01T00:00:00Z", ts(time.Hour))); r.status != 400 ||
		!strings.Contains(fmt.Sprint(r.body), "starts_at 0001-01-01T00:00:00Z is out of range") {
		t.Errorf("starts_at the zero time: %d %v", r.status, r.body)
	}
	// What the refused requests asked was not done.
	if o := h.do("GET", "/api/v1/orders/"+oid, user(1), ""); o.body["status"] != "confirmed" {
		t.Errorf("the order after a refused cancel: %v", o.body)
	}
	if b := h.do("GET", "/api/v1/blocks/999", h.admin(), ""); b.body["blocked"] != false {
		t.Errorf("user 999 after a refused block: %v", b.body)
	}
	db, err := sqlDB(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if names := column[string](t, db, `SELECT name FROM activities ORDER BY id`); fmt.Sprint(names) != "[lifecycle]" {
		t.Errorf("activities stored: %q, want only the test's own", names)
	}
	// And the same requests without their bodies are served.
	if r := h.do("POST", "/api/v1/orders/"+oid+"/cancel", user(1), ""); r.status != 200 || r.body["status"] != "cancelled" {
		t.Errorf("cancel without a body: %d %v", r.status, r.body)
	}
}

// edgeRequest sends a request with header as given (a header twice
// included) and returns the answer, which must be JSON.
func (h *hostile) edgeRequest(method, path string, header http.Header, body string) reply {
	h.t.Helper()
	req, err := http.NewRequest(method, h.url+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	if body == "" {
		req.Body, req.ContentLength = http.NoBody, 0
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := h.client.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	r := reply{status: resp.StatusCode, body: map[string]any{}}
	if err := json.Unmarshal(b, &r.body); err != nil || resp.Header.Get("Content-Type") != "application/json" {
		h.t.Errorf("%s %s: %d with Content-Type %q, not JSON: %.200s", method, path, resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	return r
}
