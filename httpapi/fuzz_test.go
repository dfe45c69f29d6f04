package httpapi_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/auth"
	"github.com/seckilldev/seckill/check"
	"github.com/seckilldev/seckill/httpapi"
	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/limit"
	"github.com/seckilldev/seckill/queue"
	"github.com/seckilldev/seckill/sale"
	"github.com/seckilldev/seckill/stock"
	"github.com/seckilldev/seckill/store"
)

// The fuzz targets send arbitrary requests to the API, wired as `seckill
// serve` wires it, on a real Redis and a SQLite file, and require of every
// answer: no 5xx, no panic, a JSON body, and no change to the state of
// Redis or the database when the answer is a 4xx. Run as ordinary tests
// they go through their seed corpus (f.Add and testdata/fuzz); with -fuzz
// they explore, e.g.
//
//	go test -run '^$' -fuzz FuzzGrab -fuzztime 30s ./httpapi

const fuzzToken = "fuzz-admin-token"

// fuzzAPI is one API on real servers, with a few fixtures: an open
// activity, one not started, one ended, and an order of user 1.
type fuzzAPI struct {
	h        http.Handler
	rdb      *redis.Client
	db       *sql.DB
	prefix   string
	open     int64 // activity on sale now
	later    int64 // not started
	ended    int64
	queued   int64  // on sale now, behind a waiting room
	ticket   string // user 1's ticket of queued's room
	order    int64  // user 1's order in open
	orderStr string

	blocklist *limit.Blocklist
}

// newFuzzAPI wires the API as serve does: with a blocklist on the same
// Redis, and opts (the identity mode, limits).
func newFuzzAPI(tb testing.TB, dbURL string, opts ...httpapi.Option) *fuzzAPI {
	tb.Helper()
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(tb)})
	tb.Cleanup(func() { rdb.Close() })
	st, err := store.Open(ctx, dbURL)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	a := &fuzzAPI{rdb: rdb, prefix: testenv.Prefix(tb)}
	engine := stock.New(rdb, stock.Config{Prefix: a.prefix})
	tb.Cleanup(engine.Close)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	room, err := queue.New(rdb, queue.Config{Key: []byte("fuzz-queue-key-0123456789abcdef!"), Prefix: a.prefix, Log: log})
	if err != nil {
		tb.Fatal(err)
	}
	svc := sale.New(st, engine, sale.Config{Admission: room}, log, nil)
	health := map[string]httpapi.Health{
		"redis":    func(ctx context.Context) error { return rdb.Ping(ctx).Err() },
		"database": st.Ping,
	}
	a.blocklist = limit.NewBlocklist(rdb, a.prefix, log)
	// The order routes' 404s are answered at once, as fuzzing asks ids
	// fast (TestMissDelay checks the wait).
	a.h = httpapi.New(svc, fuzzToken, health, log, nil, nil,
		append([]httpapi.Option{httpapi.WithBlocklist(a.blocklist), httpapi.WithMissDelay(0), httpapi.WithQueue(room)}, opts...)...)
	if a.db, err = check.Open(ctx, dbURL); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		a.deleteKeys()
		a.db.Close()
	})

	now := time.Now().UTC()
	for _, f := range []struct {
		id         *int64
		start, end time.Time
	}{
		{&a.open, now.Add(-time.Minute), now.Add(24 * time.Hour)},
		{&a.later, now.Add(24 * time.Hour), now.Add(48 * time.Hour)},
		{&a.ended, now.Add(-48 * time.Hour), now.Add(-24 * time.Hour)},
	} {
		act := seckill.Activity{Name: "fixture", Stock: 1000, StartsAt: f.start, EndsAt: f.end}
		if err := svc.CreateActivity(ctx, &act); err != nil {
			tb.Fatal(err)
		}
		*f.id = act.ID
	}
	q := seckill.Activity{Name: "queued", Stock: 1000, StartsAt: now.Add(-time.Minute), EndsAt: now.Add(24 * time.Hour), QueueRate: 100}
	if err := svc.CreateActivity(ctx, &q); err != nil {
		tb.Fatal(err)
	}
	a.queued = q.ID
	tk, err := room.Join(ctx, queue.SaleOf(q), 1)
	if err != nil {
		tb.Fatal(err)
	}
	a.ticket = tk.Token
	g, err := svc.Grab(ctx, a.open, 1)
	if err != nil {
		tb.Fatal(err)
	}
	a.order, a.orderStr = g.OrderID, strconv.FormatInt(g.OrderID, 10)
	return a
}

// deleteKeys deletes the Redis keys of every activity in the database.
func (a *fuzzAPI) deleteKeys() {
	ctx := context.Background()
	rows, err := a.db.QueryContext(ctx, `SELECT id FROM activities`)
	if err != nil {
		return
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		if rows.Scan(&id) == nil {
			k := stock.KeysFor(a.prefix, id)
			a.rdb.Del(ctx, k.Meta, k.Buyers, k.Orders)
			q := a.prefix + ":{q" + strconv.FormatInt(id, 10) + "}:"
			a.rdb.Del(ctx, q+"tickets", q+"draw", q+"arrivals", q+"state")
		}
	}
	a.rdb.Del(ctx, a.prefix+":{blocklist}:users", a.prefix+":{blocklist}:version")
}

// snapshot is the state a request may change: the database's row counts
// and remaining stock, and the Redis keys of the fixtures, of the activity
// the request names (if any) and of the next activity id (which a request
// that creates an activity fills). It is read in a few round trips, not by
// scanning a shared Redis.
func (a *fuzzAPI) snapshot(t testing.TB, named int64) string {
	t.Helper()
	ctx := context.Background()
	var b strings.Builder
	var n, orders, failures, remaining, maxID int64
	err := a.db.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM activities), (SELECT count(*) FROM orders),
		(SELECT count(*) FROM order_failures), (SELECT COALESCE(SUM(remaining), 0) FROM activities),
		(SELECT COALESCE(MAX(id), 0) FROM activities)`).Scan(&n, &orders, &failures, &remaining, &maxID)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&b, "db: %d activities, %d orders, %d failures, %d remaining\n", n, orders, failures, remaining)
	blocked, err := a.blocklist.List(ctx)
	fmt.Fprintf(&b, "blocked: %v %v\n", blocked, err)
	ids := []int64{a.open, a.later, a.ended, maxID, maxID + 1}
	if named > 0 {
		ids = append(ids, named)
	}
	pipe := a.rdb.Pipeline()
	type read struct {
		key  string
		cmds []redis.Cmder
	}
	var reads []read
	for _, id := range ids {
		k := stock.KeysFor(a.prefix, id)
		reads = append(reads,
			read{k.Meta, []redis.Cmder{pipe.HGetAll(ctx, k.Meta)}},
			read{k.Buyers, []redis.Cmder{pipe.HLen(ctx, k.Buyers)}},
			read{k.Orders, []redis.Cmder{pipe.XLen(ctx, k.Orders), pipe.XInfoGroups(ctx, k.Orders)}})
	}
	_, _ = pipe.Exec(ctx) // missing keys answer with errors; their text is the state
	for _, r := range reads {
		fmt.Fprintf(&b, "%s:", r.key)
		for _, c := range r.cmds {
			fmt.Fprintf(&b, " %s", c.String())
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// validHeader reports whether v could arrive in an HTTP/1.1 header value:
// no control characters but tab (a server rejects the others on the wire).
func validHeader(v string) bool {
	for i := range len(v) {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// do sends one request and fails t if the answer breaks a rule.
func (a *fuzzAPI) do(t *testing.T, method, target string, headers map[string]string, body []byte) {
	t.Helper()
	if err := a.try(t, method, target, headers, body); err != nil {
		t.Fatal(err)
	}
}

// try sends one request and returns the rule its answer breaks, if any:
// a 5xx, a redirect, a body that is not JSON, an error without a code, a
// 405 without Allow, a 401 without WWW-Authenticate, a 429 without
// Retry-After, or a refusal (4xx) that changed the state. Headers with
// values that cannot travel in HTTP/1.1 are left out.
func (a *fuzzAPI) try(t testing.TB, method, target string, headers map[string]string, body []byte) error {
	t.Helper()
	req, err := http.NewRequest(method, "http://seckill.test"+target, bytes.NewReader(body))
	if err != nil || !validHeader(method) {
		return nil // not a request a server could receive
	}
	for k, v := range headers {
		if v != "" && validHeader(v) {
			req.Header.Set(k, v)
		}
	}
	// A request that hangs is a failure too; the stacks say where.
	hung := time.AfterFunc(20*time.Second, func() {
		buf := make([]byte, 1<<22)
		buf = buf[:runtime.Stack(buf, true)]
		panic(fmt.Sprintf("%s %q: no answer after 20s\n%s", method, target, buf))
	})
	defer hung.Stop()
	named := pathActivity(req.URL.Path)
	before := a.snapshot(t, named)
	rec := httptest.NewRecorder()
	a.h.ServeHTTP(rec, req)
	status := rec.Code
	desc := fmt.Sprintf("%s %q headers %q body %q", method, target, headers, body)
	if status >= 500 {
		return fmt.Errorf("%s: got %d %s, want no 5xx", desc, status, rec.Body.Bytes())
	}
	for _, r := range []struct {
		status int
		header string
	}{{405, "Allow"}, {401, "WWW-Authenticate"}, {429, "Retry-After"}} {
		if status == r.status && rec.Header().Get(r.header) == "" {
			return fmt.Errorf("%s: %d without %s", desc, status, r.header)
		}
	}
	if status >= 300 && status < 400 {
		return fmt.Errorf("%s: got %d (Location %q), want no redirect", desc, status, rec.Header().Get("Location"))
	} else if method != http.MethodHead {
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			return fmt.Errorf("%s: %d with Content-Type %q, want application/json", desc, status, ct)
		}
		var v any
		if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
			return fmt.Errorf("%s: %d with a body that is not JSON: %q", desc, status, rec.Body.Bytes())
		}
		if status >= 400 {
			var e struct {
				Error struct {
					Code string `json:"code"`
				} `json:"error"`
			}
			if json.Unmarshal(rec.Body.Bytes(), &e) != nil || e.Error.Code == "" {
				return fmt.Errorf("%s: %d without an error code: %s", desc, status, rec.Body.Bytes())
			}
		}
	}
	if status >= 300 {
		if after := a.snapshot(t, named); after != before {
			return fmt.Errorf("%s: %d changed the state:\nbefore:\n%s\nafter:\n%s", desc, status, before, after)
		}
	}
	return nil
}

// pathActivity returns the activity id a path names, or 0.
func pathActivity(path string) int64 {
	rest, ok := strings.CutPrefix(path, "/api/v1/activities/")
	if !ok {
		return 0
	}
	id, _, _ := strings.Cut(rest, "/")
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil || n <= 0 {
		return 0
	}
	return n
}

func sqliteURL(tb testing.TB) string {
	return "sqlite://" + filepath.Join(tb.TempDir(), "fuzz.db")
}

// FuzzCreateActivity: POST /api/v1/activities with any Authorization,
// Content-Type and body.
func FuzzCreateActivity(f *testing.F) {
	a := newFuzzAPI(f, sqliteURL(f))
	bearer := "Bearer " + fuzzToken
	now := time.Now().UTC()
	ts := func(d time.Duration) string { return now.Add(d).Format(time.RFC3339Nano) }
	valid := `{"name":"phone","stock":5,"starts_at":"` + ts(0) + `","ends_at":"` + ts(time.Hour) + `"}`
	for _, s := range []struct{ auth, body string }{
		{bearer, valid},
		{"", valid},
		{"Bearer wrong", valid},
		{"Basic " + fuzzToken, valid},
		{bearer, ""},
		{bearer, "{}"},
		{bearer, "null"},
		{bearer, "[]"},
		{bearer, `{"name":"x",`},
		{bearer, valid + "{}"},
		{bearer, `{"name":"x","stock":"5","starts_at":"` + ts(0) + `","ends_at":"` + ts(time.Hour) + `"}`},
		{bearer, `{"name":"x","stock":1e3,"starts_at":"` + ts(0) + `","ends_at":"` + ts(time.Hour) + `"}`},
		{bearer, `{"name":"x","stock":99999999999999999999,"starts_at":"` + ts(0) + `","ends_at":"` + ts(time.Hour) + `"}`},
		{bearer, `{"name":"x","stock":100000000,"starts_at":"9999-12-31T00:00:00Z","ends_at":"9999-12-31T23:59:59.999Z"}`},
		{bearer, `{"name":"x","stock":5,"starts_at":"9999-12-31T23:00:00-05:00","ends_at":"9999-12-31T23:59:59-05:00"}`},
		{bearer, `{"name":"x","stock":5,"starts_at":"1999-12-31T23:59:59Z","ends_at":"2000-01-01T00:00:01Z"}`},
		{bearer, `{"name":"x","stock":5,"starts_at":"` + ts(time.Hour) + `","ends_at":"` + ts(0) + `"}`},
		{bearer, `{"name":"\u00e9\ud83d\ude00","stock":5,"starts_at":"` + ts(0) + `","ends_at":"` + ts(time.Hour) + `"}`},
		{bearer, `{"name":"\ud800","stock":5,"starts_at":"` + ts(0) + `","ends_at":"` + ts(time.Hour) + `"}`},
		{bearer, `{"name":"` + strings.Repeat("x", 201) + `","stock":5,"starts_at":"` + ts(0) + `","ends_at":"` + ts(time.Hour) + `"}`},
		{bearer, `{"NAME":"x","Stock":5,"STARTS_AT":"` + ts(0) + `","ends_at":"` + ts(time.Hour) + `"}`},
		{bearer, `{"name":"x","stock":5,"starts_at":"` + ts(0) + `","ends_at":"` + ts(time.Hour) + `","id":7}`},
		{bearer, `{"name":"x","name":"y","stock":5,"starts_at":"` + ts(0) + `","ends_at":"` + ts(time.Hour) + `"}`},
		{bearer, `{"name":"x","stoc\u212a":5,"starts_at":"` + ts(0) + `","ends_at":"` + ts(time.Hour) + `"}`},
		{bearer, `{"name":"  ","stock":5,"starts_at":"` + ts(0) + `","ends_at":"` + ts(time.Hour) + `"}`},
		{bearer, `{"name":"a\u202eb","stock":5,"starts_at":"` + ts(0) + `","ends_at":"` + ts(time.Hour) + `"}`},
		{bearer, `{"name":"x","stock":5,"starts_at":"` + ts(-2*time.Hour) + `","ends_at":"` + ts(-time.Hour) + `"}`},
	} {
		f.Add(s.auth, "application/json", []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, auth, contentType string, body []byte) {
		a.do(t, http.MethodPost, "/api/v1/activities", map[string]string{"Authorization": auth, "Content-Type": contentType}, body)
	})
}

// FuzzGetActivity: GET /api/v1/activities/{id} with any id.
func FuzzGetActivity(f *testing.F) {
	a := newFuzzAPI(f, sqliteURL(f))
	for _, id := range []string{strconv.FormatInt(a.open, 10), strconv.FormatInt(a.later, 10), strconv.FormatInt(a.ended, 10),
		"0", "-1", "01", "+1", " 1", "1 ", "1.0", "1e3", "abc", "", "9223372036854775807", "9223372036854775808",
		"99999999999999999999", "%00", "1/grab", "１"} {
		f.Add(id)
	}
	f.Fuzz(func(t *testing.T, id string) {
		a.do(t, http.MethodGet, "/api/v1/activities/"+url.PathEscape(id), nil, nil)
	})
}

// FuzzGrab: POST /api/v1/activities/{id}/grab with any id and X-User-ID.
func FuzzGrab(f *testing.F) {
	a := newFuzzAPI(f, sqliteURL(f))
	open, later, ended := strconv.FormatInt(a.open, 10), strconv.FormatInt(a.later, 10), strconv.FormatInt(a.ended, 10)
	for _, s := range [][2]string{
		{open, "1"}, {open, "2"}, {later, "3"}, {ended, "4"}, {"999999", "5"},
		{open, ""}, {open, "0"}, {open, "-5"}, {open, "007"}, {open, "1.5"}, {open, "abc"}, {open, " 6"},
		{open, "9223372036854775807"}, {open, "9223372036854775808"}, {open, "+7"}, {open, "1e3"},
		{"0", "1"}, {"x", "1"}, {"", "1"}, {"-1", "1"}, {"01", "1"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, id, user string) {
		a.do(t, http.MethodPost, "/api/v1/activities/"+url.PathEscape(id)+"/grab", map[string]string{"X-User-ID": user}, nil)
	})
}

// FuzzGetOrder: GET /api/v1/orders/{id} with any id, X-User-ID and
// Authorization.
func FuzzGetOrder(f *testing.F) {
	a := newFuzzAPI(f, sqliteURL(f))
	bearer := "Bearer " + fuzzToken
	for _, s := range [][3]string{
		{a.orderStr, "1", ""}, {a.orderStr, "2", ""}, {a.orderStr, "", bearer}, {a.orderStr, "", "Bearer wrong"},
		{a.orderStr, "", ""}, {"12345", "1", ""}, {"0", "1", ""}, {"-1", "1", ""}, {"abc", "1", ""},
		{"9223372036854775807", "1", ""}, {"9223372036854775807", "", bearer}, {"1", "", bearer},
		{strconv.FormatInt(a.order+1, 10), "1", ""}, {strconv.FormatInt(a.order+1, 10), "", bearer},
		{a.orderStr, "01", ""}, {a.orderStr, "1", "Basic x"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, id, user, auth string) {
		a.do(t, http.MethodGet, "/api/v1/orders/"+url.PathEscape(id), map[string]string{"X-User-ID": user, "Authorization": auth}, nil)
	})
}

// FuzzRoutes: any method on any path, with a body: the routes above,
// /healthz and every path the API does not serve.
func FuzzRoutes(f *testing.F) {
	a := newFuzzAPI(f, sqliteURL(f))
	open := strconv.FormatInt(a.open, 10)
	for _, s := range [][3]string{
		{"GET", "/healthz", ""}, {"HEAD", "/healthz", ""}, {"POST", "/healthz", "x"}, {"GET", "/metrics", ""},
		{"DELETE", "/api/v1/activities", ""}, {"PUT", "/api/v1/activities/" + open, "{}"},
		{"GET", "/api/v1/activities/" + open + "/grab", ""}, {"PATCH", "/api/v1/orders/" + a.orderStr, ""},
		{"GET", "/", ""}, {"GET", "/api/v2/x", ""}, {"GET", "/api/v1/activities/", ""}, {"GET", "//api/v1/activities/1", ""},
		{"GET", "/api/v1/activities/1/../1", ""}, {"OPTIONS", "/", ""}, {"CONNECT", "/", ""}, {"BREW", "/healthz", ""},
		{"GET", "/api/v1/activities/%2e%2e", ""}, {"POST", "/api/v1/activities/" + open + "/grab/", ""},
	} {
		f.Add(s[0], s[1], []byte(s[2]))
	}
	f.Fuzz(func(t *testing.T, method, path string, body []byte) {
		if method == "" || !strings.HasPrefix(path, "/") {
			return
		}
		a.do(t, method, path, map[string]string{"X-User-ID": "42"}, body)
	})
}

// fuzzSecret is the HS256 secret of the JWT-mode targets.
var fuzzSecret = []byte("fuzz-secret-fuzz-secret-fuzz-sec")

// jwtSeeds are bearer tokens of every kind a verifier must tell apart.
func jwtSeeds(tb testing.TB) []string {
	tb.Helper()
	mint := func(method jwt.SigningMethod, key any, claims jwt.MapClaims) string {
		s, err := jwt.NewWithClaims(method, claims).SignedString(key)
		if err != nil {
			tb.Fatal(err)
		}
		return s
	}
	now := time.Now()
	claims := func(sub any, exp time.Time, aud string) jwt.MapClaims {
		return jwt.MapClaims{"sub": sub, "exp": exp.Unix(), "aud": aud}
	}
	valid := mint(jwt.SigningMethodHS256, fuzzSecret, claims("1", now.Add(time.Hour), "seckill"))
	return []string{
		"Bearer " + valid,
		"bearer " + valid,
		"BEARER  " + valid,
		"Bearer " + mint(jwt.SigningMethodHS256, fuzzSecret, claims("2", now.Add(time.Hour), "seckill")),
		"Bearer " + mint(jwt.SigningMethodHS256, fuzzSecret, claims("3", now.Add(-time.Hour), "seckill")),                    // expired
		"Bearer " + mint(jwt.SigningMethodHS256, fuzzSecret, claims("4", now.Add(time.Hour), "other")),                       // wrong audience
		"Bearer " + mint(jwt.SigningMethodHS256, []byte("x"+string(fuzzSecret)), claims("5", now.Add(time.Hour), "seckill")), // forged
		"Bearer " + mint(jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, claims("6", now.Add(time.Hour), "seckill")),
		"Bearer " + mint(jwt.SigningMethodHS256, fuzzSecret, claims("007", now.Add(time.Hour), "seckill")),
		"Bearer " + mint(jwt.SigningMethodHS256, fuzzSecret, claims(7.5, now.Add(time.Hour), "seckill")),
		"Bearer " + valid[:len(valid)-2],
		"Bearer " + fuzzToken,
		"Bearer wrong",
		"Bearer",
		"Bearer ",
		"Basic " + valid,
		"",
	}
}

// FuzzJWT: the grab, the order and the activity routes in JWT mode, with a
// per-user rate limit, with any Authorization; X-User-ID is sent too and
// must never count.
func FuzzJWT(f *testing.F) {
	v, err := auth.New(context.Background(), auth.Config{Secret: fuzzSecret, Audience: "seckill"})
	if err != nil {
		f.Fatal(err)
	}
	a := newFuzzAPI(f, sqliteURL(f), httpapi.WithVerifier(v),
		httpapi.WithUserLimit(limit.NewLocal[int64](limit.Rate{PerSecond: 100, Burst: 100}, 0)))
	open, later := strconv.FormatInt(a.open, 10), strconv.FormatInt(a.later, 10)
	for _, tok := range jwtSeeds(f) {
		for route, id := range []string{open, a.orderStr, later} {
			f.Add(uint8(route), id, tok)
		}
	}
	f.Fuzz(func(t *testing.T, route uint8, id, authorization string) {
		headers := map[string]string{"Authorization": authorization, "X-User-ID": "1"}
		switch route % 3 {
		case 0:
			a.do(t, http.MethodPost, "/api/v1/activities/"+url.PathEscape(id)+"/grab", headers, nil)
		case 1:
			a.do(t, http.MethodGet, "/api/v1/orders/"+url.PathEscape(id), headers, nil)
		default:
			a.do(t, http.MethodGet, "/api/v1/activities/"+url.PathEscape(id), headers, nil)
		}
	})
}

// FuzzAdmin: the blocklist's admin API (and /healthz, whose details are
// the admin's) with any method, user id and Authorization.
func FuzzAdmin(f *testing.F) {
	a := newFuzzAPI(f, sqliteURL(f))
	bearer := "Bearer " + fuzzToken
	for _, s := range [][3]string{
		{"PUT", "42", bearer}, {"GET", "42", bearer}, {"DELETE", "42", bearer}, {"GET", "", bearer},
		{"PUT", "42", ""}, {"PUT", "42", "Bearer wrong"}, {"PUT", "42", "bearer " + fuzzToken}, {"PUT", "42", "Basic " + fuzzToken},
		{"PUT", "0", bearer}, {"PUT", "-1", bearer}, {"PUT", "042", bearer}, {"PUT", "abc", bearer},
		{"PUT", "9223372036854775807", bearer}, {"PUT", "9223372036854775808", bearer}, {"POST", "42", bearer},
		{"PATCH", "", bearer}, {"GET", "healthz", bearer}, {"GET", "healthz", "Bearer wrong"}, {"GET", "healthz", ""},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, method, user, authorization string) {
		if method == "" {
			return
		}
		path := "/api/v1/blocks/" + url.PathEscape(user)
		switch user {
		case "":
			path = "/api/v1/blocks"
		case "healthz":
			path = "/healthz"
		}
		a.do(t, method, path, map[string]string{"Authorization": authorization}, nil)
	})
}

// TestCreateActivityNULNameOnPostgres: a name holding a NUL character
// (valid JSON, "\u0000") is accepted by validation and passed to
// PostgreSQL, which refuses it (SQLSTATE 22021, invalid byte sequence for
// encoding "UTF8": 0x00); the API answers 500 "internal" for a client's
// bad input, and logs an error. It must be a 400 invalid_argument.
func TestCreateActivityNULNameOnPostgres(t *testing.T) {
	a := newFuzzAPI(t, testenv.PostgresURL(t))
	now := time.Now().UTC()
	body := `{"name":"a\u0000b","stock":5,"starts_at":"` + now.Format(time.RFC3339) + `","ends_at":"` + now.Add(time.Hour).Format(time.RFC3339) + `"}`
	req := httptest.NewRequest(http.MethodPost, "/api/v1/activities", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+fuzzToken)
	req.Header.Set("Content-Type", "application/json")
	named := pathActivity(req.URL.Path)
	before := a.snapshot(t, named)
	rec := httptest.NewRecorder()
	a.h.ServeHTTP(rec, req)
	if rec.Code != http.StatusBadRequest {
		t.Errorf("POST /api/v1/activities with a NUL in the name on PostgreSQL: got %d %s, want 400 invalid_argument",
			rec.Code, strings.TrimSpace(rec.Body.String()))
	}
	if after := a.snapshot(t, 0); after != before {
		t.Errorf("the refused request changed the state:\n%s\n%s", before, after)
	}
}

// TestFuzzRulesControls: the rules the fuzz targets apply must catch a
// broken API: one that fails with a 5xx, one that answers a 4xx after
// changing the state, one whose error is not JSON.
func TestFuzzRulesControls(t *testing.T) {
	a := newFuzzAPI(t, sqliteURL(t))
	api := a.h
	defer func() { a.h = api }()
	grab := "/api/v1/activities/" + strconv.FormatInt(a.open, 10) + "/grab"
	controls := []struct {
		name string
		h    http.HandlerFunc
		want string
	}{
		{"a 500", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(500)
			w.Write([]byte(`{"error":{"code":"internal","message":"x"}}`))
		}, "want no 5xx"},
		{"a 409 after a grab went through", func(w http.ResponseWriter, r *http.Request) {
			api.ServeHTTP(httptest.NewRecorder(), r)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(409)
			w.Write([]byte(`{"error":{"code":"sold_out","message":"x"}}`))
		}, "changed the state"},
		{"an error that is not JSON", func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "bad request", 400)
		}, "want application/json"},
		{"an error without a code", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(400)
			w.Write([]byte(`{"message":"x"}`))
		}, "without an error code"},
	}
	for _, c := range controls {
		a.h = c.h
		err := a.try(t, http.MethodPost, grab, map[string]string{"X-User-ID": "77"}, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("control %q: got %v, want an error saying %q", c.name, err, c.want)
		}
	}
	a.h = api
	if err := a.try(t, http.MethodPost, grab, map[string]string{"X-User-ID": "78"}, nil); err != nil {
		t.Errorf("the real API broke a rule: %v", err)
	}
}
