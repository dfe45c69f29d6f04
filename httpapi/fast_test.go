package httpapi_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"

	"github.com/seckilldev/seckill/httpapi"
	"github.com/seckilldev/seckill/limit"
)

// TestServeFastAnswersAsServeHTTP: a grab answered by the fast front
// (ServeFast on fasthttp, as serve runs it) gets the answer net/http's
// ServeHTTP gives: status, error code, the headers that go with them
// (Content-Type, WWW-Authenticate, Retry-After). Requests that are not
// well-formed grabs, or carry a query, are left to ServeHTTP.
func TestServeFastAnswersAsServeHTTP(t *testing.T) {
	a := newFuzzAPI(t, sqliteURL(t), httpapi.WithLimits(httpapi.Limits{MaxBody: 1024}),
		httpapi.WithUserLimit(limit.NewLocal[int64](limit.Rate{PerSecond: 0.001, Burst: 3}, 0)))
	api := a.h.(*httpapi.Server)

	var fast atomic.Bool
	slow := fasthttpadaptor.NewFastHTTPHandler(api)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		took := api.ServeFast(ctx)
		fast.Store(took)
		if !took {
			slow(ctx)
		}
	}, MaxRequestBodySize: 1 << 20}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown() })
	std := httptest.NewServer(api)
	t.Cleanup(std.Close)

	if err := a.blocklist.Block(context.Background(), 666); err != nil {
		t.Fatal(err)
	}
	open := fmt.Sprint(a.open)
	encoded := fmt.Sprintf("/api/v1/activities/%%%X%s/grab", open[0], open[1:])
	grab := func(id int64) string { return fmt.Sprintf("/api/v1/activities/%d/grab", id) }
	// Each front gets its own users (uid + offset), so that both see the
	// same state.
	cases := []struct {
		name    string
		method  string
		path    string
		header  http.Header
		body    string
		native  bool
		status  int
		code    string
		uidFree bool // the header carries no user id to offset
	}{
		{"a new buyer", "POST", grab(a.open), http.Header{"X-User-Id": {"100"}}, "", true, 202, "", false},
		{"the same buyer again", "POST", grab(a.open), http.Header{"X-User-Id": {"100"}}, "", true, 200, "", false},
		{"the same buyer a third time", "POST", grab(a.open), http.Header{"X-User-Id": {"100"}}, "", true, 200, "", false},
		{"a query string", "POST", grab(a.open) + "?x=1", http.Header{"X-User-Id": {"101"}}, "", false, 202, "", false},
		{"a query parameter twice", "POST", grab(a.open) + "?x=1&x=2", http.Header{"X-User-Id": {"113"}}, "", false, 400, "invalid_argument", false},
		{"no X-User-ID", "POST", grab(a.open), http.Header{}, "", true, 400, "invalid_argument", true},
		{"two X-User-ID", "POST", grab(a.open), http.Header{"X-User-Id": {"102", "103"}}, "", true, 400, "invalid_argument", true},
		{"a non-canonical user id", "POST", grab(a.open), http.Header{"X-User-Id": {"0102"}}, "", true, 400, "invalid_argument", true},
		{"a wrong bearer token", "POST", grab(a.open), http.Header{"Authorization": {"Bearer nope"}, "X-User-Id": {"104"}}, "", true, 401, "unauthorized", false},
		{"the admin", "POST", grab(a.open), http.Header{"Authorization": {"bearer " + fuzzToken}}, "", true, 400, "invalid_argument", true},
		{"not started", "POST", grab(a.later), http.Header{"X-User-Id": {"105"}}, "", true, 403, "not_started", false},
		{"ended", "POST", grab(a.ended), http.Header{"X-User-Id": {"106"}}, "", true, 403, "ended", false},
		{"no such activity", "POST", grab(987654321), http.Header{"X-User-Id": {"107"}}, "", true, 404, "not_found", false},
		{"a blocked user", "POST", grab(a.open), http.Header{"X-User-Id": {"666"}}, "", true, 403, "blocked", true},
		{"a body beyond the API's bound", "POST", grab(a.open), http.Header{"X-User-Id": {"108"}}, strings.Repeat("x", 2000), true, 413, "too_large", false},
		{"a body", "POST", grab(a.open), http.Header{"X-User-Id": {"114"}, "Content-Type": {"application/xml"}}, "<a/>", true, 415, "unsupported_media_type", false},
		{"a JSON body", "POST", grab(a.open), http.Header{"X-User-Id": {"115"}, "Content-Type": {"application/json"}}, "{}", true, 415, "unsupported_media_type", false},
		{"a body with two Content-Types", "POST", grab(a.open), http.Header{"X-User-Id": {"116"}, "Content-Type": {"text/plain", "application/json"}}, "{}", true, 400, "invalid_argument", false},
		{"over the user's rate (4th request)", "POST", grab(a.open), http.Header{"X-User-Id": {"100"}}, "", true, 429, "rate_limited", false},
		{"GET", "GET", grab(a.open), http.Header{"X-User-Id": {"109"}}, "", false, 405, "method_not_allowed", false},
		{"a non-canonical activity id", "POST", "/api/v1/activities/01/grab", http.Header{"X-User-Id": {"110"}}, "", false, 400, "invalid_argument", false},
		{"an encoded path", "POST", encoded, http.Header{"X-User-Id": {"111"}}, "", false, 404, "not_found", false},
		{"an unclean path", "POST", "/api/v1//activities/1/grab", http.Header{"X-User-Id": {"112"}}, "", false, 404, "not_found", false},
	}
	orderID := regexp.MustCompile(`"order_id":"\d+"`)
	for _, c := range cases {
		var got [2]string
		for i, base := range []string{"http://" + ln.Addr().String(), std.URL} {
			h := c.header.Clone()
			if !c.uidFree && h.Get("X-User-Id") != "" && i == 1 {
				h.Set("X-User-Id", h.Get("X-User-Id")+"000")
			}
			req, err := http.NewRequest(c.method, base+c.path, strings.NewReader(c.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header = h
			if c.body == "" {
				req.Body, req.ContentLength = http.NoBody, 0
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body := orderID.ReplaceAllString(string(b), `"order_id":"N"`)
			got[i] = fmt.Sprintf("%d %s|%s|%s|%s", resp.StatusCode, resp.Header.Get("Content-Type"),
				resp.Header.Get("Www-Authenticate"), resp.Header.Get("Retry-After"), strings.TrimSpace(body))
			if i == 0 && fast.Load() != c.native {
				t.Errorf("%s: answered natively %v, want %v", c.name, fast.Load(), c.native)
			}
			if resp.StatusCode != c.status || (c.code != "" && !strings.Contains(body, `"code":"`+c.code+`"`)) {
				t.Errorf("%s (front %d): %s; want %d %s", c.name, i, got[i], c.status, c.code)
			}
		}
		if got[0] != got[1] {
			t.Errorf("%s: the fast front answers\n  %s\nnet/http answers\n  %s", c.name, got[0], got[1])
		}
	}
}
