package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckilldev/seckill/check"
	"github.com/seckilldev/seckill/httpapi"
	"github.com/seckilldev/seckill/stock"
	"github.com/seckilldev/seckill/store"
	"github.com/seckilldev/seckill/worker"
)

// openAPI is the part of the description the conformance tests read.
type openAPI struct {
	OpenAPI string                                 `json:"openapi"`
	Paths   map[string]map[string]openAPIOperation `json:"paths"`
	Comp    struct {
		Schemas struct {
			ErrorCode struct {
				Enum     []string       `json:"enum"`
				Statuses map[string]int `json:"x-statuses"`
			} `json:"ErrorCode"`
		} `json:"schemas"`
	} `json:"components"`
}

type openAPIOperation struct {
	OperationID string `json:"operationId"`
	Responses   map[string]struct {
		Codes []string `json:"x-error-codes"`
	} `json:"responses"`
}

// loadOpenAPI fetches the description the server serves.
func loadOpenAPI(t *testing.T, h http.Handler) (*openAPI, []byte) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/api/v1/openapi.json", nil))
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("GET /api/v1/openapi.json: %d %s", rec.Code, rec.Header().Get("Content-Type"))
	}
	var doc openAPI
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
		t.Fatalf("the description is not JSON: %v", err)
	}
	if doc.OpenAPI != "3.1.0" || len(doc.Paths) == 0 {
		t.Fatalf("openapi %q with %d paths, want 3.1.0 and the API's paths", doc.OpenAPI, len(doc.Paths))
	}
	return &doc, rec.Body.Bytes()
}

// The description and the server agree on the routes and methods, on the
// error codes and their statuses, and each declared error response names
// codes of its status; every code the server has is declared somewhere.
func TestOpenAPIDeclaresTheServer(t *testing.T) {
	a := newFuzzAPI(t, sqliteURL(t))
	// Every optional route on: the blocklist's admin API and /metrics.
	full := httpapi.New(nil, fuzzToken, nil, slog.New(slog.NewTextHandler(io.Discard, nil)), nil,
		prometheus.NewRegistry(), httpapi.WithBlocklist(a.blocklist))
	doc, _ := loadOpenAPI(t, full)

	served := map[string][]string{}
	for _, r := range full.Routes() {
		served[r.Pattern] = r.Methods
	}
	declared := map[string][]string{}
	for path, ops := range doc.Paths {
		for m := range ops {
			declared[path] = append(declared[path], strings.ToUpper(m))
		}
		slices.Sort(declared[path])
	}
	for path, methods := range served {
		if !slices.Equal(methods, declared[path]) {
			t.Errorf("%s: the server serves %v, the description declares %v", path, methods, declared[path])
		}
	}
	for path, methods := range declared {
		if _, ok := served[path]; !ok {
			t.Errorf("%s %v: declared, not served", path, methods)
		}
	}

	statuses := httpapi.ErrorStatuses()
	if got := doc.Comp.Schemas.ErrorCode.Statuses; !maps.Equal(got, statuses) {
		t.Errorf("ErrorCode x-statuses %v, the server's %v", got, statuses)
	}
	if enum := doc.Comp.Schemas.ErrorCode.Enum; !slices.Equal(enum, slices.Sorted(maps.Keys(statuses))) {
		t.Errorf("ErrorCode enum %v, the server's codes %v", enum, slices.Sorted(maps.Keys(statuses)))
	}
	used := map[string]bool{}
	for path, ops := range doc.Paths {
		for m, op := range ops {
			for s, resp := range op.Responses {
				status, err := strconv.Atoi(s)
				if err != nil || status < 200 || status > 599 {
					t.Errorf("%s %s: response %q is not a status", m, path, s)
					continue
				}
				if status < 400 && len(resp.Codes) > 0 || status >= 400 && len(resp.Codes) == 0 {
					t.Errorf("%s %s %d: error codes %v", m, path, status, resp.Codes)
				}
				for _, c := range resp.Codes {
					used[c] = true
					if statuses[c] != status {
						t.Errorf("%s %s %d declares %s, which the server answers with %d", m, path, status, c, statuses[c])
					}
				}
			}
		}
	}
	for c := range statuses {
		// 405 answers a method a path does not serve, 408, 431 and 505
		// come from the HTTP server before any operation (ErrorCode's
		// description says so): no operation declares them.
		if !used[c] && c != "method_not_allowed" && c != "request_timeout" && c != "headers_too_large" && c != "version_not_supported" {
			t.Errorf("error code %s (%d) is declared by no operation", c, statuses[c])
		}
	}
}

// Every answer the server gives to a battery of requests on every route,
// good and bad (ids, identities, bodies, content types, sizes, methods), is
// declared by the description: its status on that operation, and its error
// code among those of that status. And the reverse: every status the
// description declares is answered by the battery, but for those that need
// a limit or a failure (429, 500, 503).
func TestOpenAPIAnswers(t *testing.T) {
	dbURL := sqliteURL(t)
	a := newFuzzAPI(t, dbURL)
	srv := a.h.(*httpapi.Server)
	doc, _ := loadOpenAPI(t, srv)
	now := time.Now().UTC()
	// The fuzz API has no /metrics (it has no gatherer): a server of its
	// own answers it, and only it.
	metrics := httpapi.New(nil, fuzzToken, nil, slog.New(slog.NewTextHandler(io.Discard, nil)), nil, prometheus.NewRegistry())
	// A sale with a payment window and an order awaiting payment for each
	// of pay (user 1's) and cancel (user 2's), written to the database,
	// so that both answer their success; and a sold-out sale, so that
	// grab answers 409.
	toPay, toCancel, soldOut := lifecycleFixtures(t, a, dbURL)
	validBody := map[string]string{
		"POST /api/v1/activities": fmt.Sprintf(`{"name":"probe","stock":3,"starts_at":%q,"ends_at":%q}`,
			now.Add(-time.Minute).Format(time.RFC3339), now.Add(time.Hour).Format(time.RFC3339)),
		"POST /api/v1/orders/{id}/pay": `{"payment_ref":"probe-1"}`,
	}
	ids := map[string][]string{
		"{id}": {strconv.FormatInt(a.open, 10), strconv.FormatInt(a.later, 10), strconv.FormatInt(a.ended, 10), soldOut, "424242", "x",
			strconv.FormatInt(a.queued, 10)},
		"{user}": {"5", "x"},
	}
	orderIDs := []string{a.orderStr, "549755813999", "x"}
	if err := a.blocklist.Block(context.Background(), 7); err != nil {
		t.Fatal(err)
	}
	identities := []http.Header{
		{}, {"X-User-Id": {"1"}}, {"X-User-Id": {"2"}}, {"X-User-Id": {"7"}}, {"X-User-Id": {"abc"}},
		{"Authorization": {"Bearer " + fuzzToken}}, {"Authorization": {"Bearer wrong"}},
		{"Authorization": {"Bearer " + fuzzToken, "Bearer " + fuzzToken}}, // sent twice
	}
	type probe struct {
		target, body, contentType string
		length                    int64 // declared, when the body is left out
		twice                     bool  // the Content-Type sent twice
	}
	seen := map[string]map[int]bool{} // operation -> statuses answered
	check := func(h http.Handler, method, pattern string, p probe, headers http.Header) {
		body := io.Reader(strings.NewReader(p.body))
		req := httptest.NewRequest(method, p.target, body)
		if p.length > 0 {
			req.ContentLength = p.length
		}
		if p.contentType != "" {
			req.Header.Set("Content-Type", p.contentType)
		}
		if p.twice {
			req.Header.Add("Content-Type", p.contentType)
		}
		for k, v := range headers {
			req.Header[k] = v
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		desc := fmt.Sprintf("%s %s %v body %.40q", method, p.target, headers, p.body)
		var e struct{ Error struct{ Code string } }
		_ = json.Unmarshal(rec.Body.Bytes(), &e)
		op, ok := doc.Paths[pattern][strings.ToLower(method)]
		if !ok {
			if rec.Code != http.StatusMethodNotAllowed || e.Error.Code != "method_not_allowed" {
				t.Errorf("%s: %d %s, want 405 method_not_allowed for an undeclared method", desc, rec.Code, e.Error.Code)
			}
			return
		}
		key := method + " " + pattern
		if seen[key] == nil {
			seen[key] = map[int]bool{}
		}
		seen[key][rec.Code] = true
		resp, declared := op.Responses[strconv.Itoa(rec.Code)]
		switch {
		case !declared:
			t.Errorf("%s: answered %d %s, which %s does not declare", desc, rec.Code, rec.Body.Bytes(), op.OperationID)
		case rec.Code >= 400 && !slices.Contains(resp.Codes, e.Error.Code) && !(pattern == "/healthz" && rec.Code == 503):
			t.Errorf("%s: answered %d with code %q; %s declares %v for it", desc, rec.Code, e.Error.Code, op.OperationID, resp.Codes)
		}
	}
	type route struct {
		h *httpapi.Server
		httpapi.Route
	}
	var routes []route
	for _, r := range srv.Routes() {
		routes = append(routes, route{srv, r})
	}
	for _, r := range metrics.Routes() {
		if r.Pattern == "/metrics" {
			routes = append(routes, route{metrics, r})
		}
	}
	for _, r := range routes {
		targets := []string{r.Pattern}
		for param, values := range ids {
			if strings.Contains(r.Pattern, param) {
				targets = nil
				vs := values
				switch r.Pattern {
				case "/api/v1/orders/{id}/pay":
					vs = append(slices.Clone(orderIDs), toPay)
				case "/api/v1/orders/{id}/cancel":
					// toPay is paid by then (pay's route comes first): 409.
					vs = append(slices.Clone(orderIDs), toCancel, toPay)
				case "/api/v1/orders/{id}":
					vs = orderIDs
				}
				for _, v := range vs {
					targets = append(targets, strings.Replace(r.Pattern, param, v, 1))
				}
				if r.Pattern == "/api/v1/activities/{id}/queue" {
					// user 1's ticket: its poll answers 200, others' 400
					targets = append(targets, fmt.Sprintf("/api/v1/activities/%d/queue?ticket=%s", a.queued, a.ticket))
				}
			}
		}
		for _, method := range append(slices.Clone(r.Methods), "PATCH") {
			for _, target := range targets {
				// Every request: without a body, with a body of another
				// type, a query parameter twice (the strict edges).
				probes := []probe{{target: target}, {target: target, body: "hi", contentType: "text/plain"},
					{target: target + "?limit=1&limit=2"}}
				if method != "GET" {
					probes = append(probes,
						probe{target: target, body: validBody[method+" "+r.Pattern], contentType: "application/json"},
						// Once paid with probe-1, another reference under
						// the same (no) key: 422.
						probe{target: target, body: `{"payment_ref":"probe-2"}`, contentType: "application/json"},
						probe{target: target, body: validBody[method+" "+r.Pattern], contentType: "application/json", twice: true},
						probe{target: target, body: "{", contentType: "application/json"},
						probe{target: target, body: `{"name":"x"}`, contentType: "text/plain"},
						probe{target: target, contentType: "application/json", length: httpapi.DefaultMaxBody + 1})
				} else {
					probes = append(probes, probe{target: target, length: httpapi.DefaultMaxBody + 1})
				}
				for _, p := range probes {
					for _, id := range identities {
						check(r.h, method, r.Pattern, p, id)
					}
				}
			}
		}
	}
	// What the battery cannot reach (a 429 without limits, a 500, a 503
	// or 504 with Redis and the database up) is declared from the code;
	// listed to keep the battery honest. Any other status declared must
	// have been answered.
	var unreached []string
	for path, ops := range doc.Paths {
		for m, op := range ops {
			k := strings.ToUpper(m) + " " + path
			if seen[k] == nil {
				t.Errorf("%s: declared, never probed", k)
				continue
			}
			for s := range op.Responses {
				status, _ := strconv.Atoi(s)
				switch {
				case seen[k][status]:
				case status == http.StatusTooManyRequests || status == http.StatusInternalServerError || status == http.StatusServiceUnavailable ||
					status == http.StatusGatewayTimeout:
					unreached = append(unreached, fmt.Sprintf("%s %s", k, s))
				default:
					t.Errorf("%s: declares %s, which the battery never got", k, s)
				}
			}
		}
	}
	slices.Sort(unreached)
	t.Logf("declared, not reached by the battery: %s", strings.Join(unreached, ", "))
}

// The description served is the embedded file, byte for byte, and valid
// JSON with the API's error shape.
func TestOpenAPIServed(t *testing.T) {
	a := newFuzzAPI(t, sqliteURL(t))
	_, b := loadOpenAPI(t, a.h)
	if !bytes.Contains(b, []byte(`"#/components/schemas/Error"`)) {
		t.Error("no Error schema referenced")
	}
}

// lifecycleFixtures creates, through the API, a sale with a payment window
// in which users 1 and 2 each hold an order awaiting payment, written to
// the database by a worker (with every order the streams hold, the fuzz
// API's order of user 1 among them), and a sale of one unit, sold to user
// 5. It returns the two orders' ids and the sold-out sale's.
func lifecycleFixtures(t *testing.T, a *fuzzAPI, dbURL string) (toPay, toCancel, soldOut string) {
	t.Helper()
	post := func(path string, header http.Header, body string) (v struct {
		ID      int64  `json:"id"`
		OrderID string `json:"order_id"`
	}) {
		t.Helper()
		req := httptest.NewRequest("POST", path, strings.NewReader(body))
		req.Header = header
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		rec := httptest.NewRecorder()
		a.h.ServeHTTP(rec, req)
		if rec.Code/100 != 2 || json.Unmarshal(rec.Body.Bytes(), &v) != nil {
			t.Fatalf("POST %s: %d %s", path, rec.Code, rec.Body.Bytes())
		}
		return v
	}
	now := time.Now().UTC()
	sale := func(stock, payWithin int) int64 {
		return post("/api/v1/activities", http.Header{"Authorization": {"Bearer " + fuzzToken}},
			fmt.Sprintf(`{"name":"lifecycle","stock":%d,"starts_at":%q,"ends_at":%q,"pay_within_seconds":%d}`, stock,
				now.Add(-time.Minute).Format(time.RFC3339), now.Add(time.Hour).Format(time.RFC3339), payWithin)).ID
	}
	grab := func(id int64, user string) string {
		return post(fmt.Sprintf("/api/v1/activities/%d/grab", id), http.Header{"X-User-Id": {user}}, "").OrderID
	}
	pay := sale(5, 3600)
	toPay, toCancel = grab(pay, "1"), grab(pay, "2")
	one := sale(1, 0)
	grab(one, "5")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := store.Open(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	eng := stock.New(a.rdb, stock.Config{Prefix: a.prefix})
	defer eng.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = worker.New(st, eng, worker.Config{Poll: 50 * time.Millisecond}, slog.New(slog.DiscardHandler), nil).Run(ctx)
	}()
	defer func() { cancel(); <-done }()
	if err := check.WaitDrained(ctx, a.rdb, a.prefix, pay, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	return toPay, toCancel, strconv.FormatInt(one, 10)
}
