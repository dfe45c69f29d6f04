// Package httpapi is the JSON HTTP API of seckill. Only this package maps
// error codes to HTTP statuses.
package httpapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/auth"
	"github.com/seckilldev/seckill/queue"
	"github.com/seckilldev/seckill/sale"
)

// codes maps error codes to HTTP statuses.
var codes = map[string]int{
	seckill.EINVALID:      http.StatusBadRequest,
	seckill.EUNAUTHORIZED: http.StatusUnauthorized,
	seckill.ENOTFOUND:     http.StatusNotFound,
	seckill.ESOLDOUT:      http.StatusConflict,
	seckill.ENOTSTARTED:   http.StatusForbidden,
	seckill.EENDED:        http.StatusForbidden,
	seckill.EUNAVAILABLE:  http.StatusServiceUnavailable,
	seckill.EINTERNAL:     http.StatusInternalServerError,
	// A grab sent to Redis that got no answer in time, or whose replicas
	// did not confirm it: the upstream timed out, and the status alone
	// tells it from 503 (surely not done) to a client that reads no body.
	seckill.EOUTCOMEUNKNOWN: http.StatusGatewayTimeout,

	seckill.EORDEREXPIRED:   http.StatusConflict,
	seckill.EORDERCANCELLED: http.StatusConflict,
	seckill.EORDERPAID:      http.StatusConflict,
	seckill.ENOTPAYABLE:     http.StatusConflict,
	seckill.ENOTCANCELLABLE: http.StatusConflict,
	seckill.EKEYREUSED:      http.StatusUnprocessableEntity,

	queue.EPASSREQUIRED: http.StatusForbidden,
	queue.EPASSINVALID:  http.StatusForbidden,
	queue.EPASSEXPIRED:  http.StatusForbidden,
	queue.ETICKET:       http.StatusBadRequest,
	queue.EWORKREQUIRED: http.StatusForbidden,
	queue.EWORKINVALID:  http.StatusForbidden,

	"method_not_allowed": http.StatusMethodNotAllowed,
	codeRateLimited:      http.StatusTooManyRequests,
	codeBlocked:          http.StatusForbidden,
	codeTooLarge:         http.StatusRequestEntityTooLarge,
	codeMediaType:        http.StatusUnsupportedMediaType,
	codeOverloaded:       http.StatusServiceUnavailable,
	codeTokenMissing:     http.StatusUnauthorized,
	codeTokenExpired:     http.StatusUnauthorized,
	codeTokenInvalid:     http.StatusUnauthorized,
	codeTimeout:          http.StatusRequestTimeout,
	codeHeadersLarge:     http.StatusRequestHeaderFieldsTooLarge,
	codeVersion:          http.StatusHTTPVersionNotSupported,
}

// Server serves the API.
type Server struct {
	sale       *sale.Service
	adminToken string
	adminHash  [sha256.Size]byte
	health     []*healthCheck
	log        *slog.Logger
	latency    *prometheus.HistogramVec
	refused    refusals
	mux        *http.ServeMux

	grabLatency routeLatency // the grab route's, for ServeFast

	room *queue.Room // the waiting rooms (WithQueue), nil: none

	verifier  Verifier
	userLimit Limiter[int64]
	addrLimit Limiter[netip.Addr]
	trusted   []netip.Prefix
	blocklist Blocklist

	maxBody     int64
	maxInFlight int64
	inFlight    atomic.Int64
	missDelay   time.Duration // see DefaultMissDelay

	routes []Route // as registered, for Routes
}

// New returns the API handler. gatherer serves /metrics (nil: none);
// registerer receives the API's own metrics (nil: none). Without options,
// buyers are named by the X-User-ID header, nothing is rate limited, and
// the Limits are the defaults.
func New(s *sale.Service, adminToken string, health map[string]Health, log *slog.Logger,
	registerer prometheus.Registerer, gatherer prometheus.Gatherer, opts ...Option) *Server {
	srv := &Server{sale: s, adminToken: adminToken, adminHash: sha256.Sum256([]byte(adminToken)),
		health: newHealthChecks(health), log: log, mux: http.NewServeMux(), refused: newRefusals(registerer),
		maxBody: DefaultMaxBody, maxInFlight: DefaultMaxInFlight, missDelay: DefaultMissDelay,
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "seckill_http_request_seconds",
			Help:    "HTTP request latency by route and status class.",
			Buckets: []float64{.0002, .0005, .001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5},
		}, []string{"route", "code"})}
	if registerer != nil {
		registerer.MustRegister(srv.latency)
	}
	srv.grabLatency = srv.routeLatency("grab")
	for _, o := range opts {
		o(srv)
	}
	srv.handle("/api/v1/activities", "activities", map[string]http.HandlerFunc{"POST": srv.createActivity})
	srv.handle("/api/v1/activities/{id}", "activity", map[string]http.HandlerFunc{"GET": srv.getActivity})
	srv.handle("/api/v1/activities/{id}/grab", "grab", map[string]http.HandlerFunc{"POST": srv.grab})
	srv.handle("/api/v1/activities/{id}/queue", "queue", map[string]http.HandlerFunc{"POST": srv.joinQueue, "GET": srv.queueStatus})
	srv.handle("/api/v1/activities/{id}/queue/challenge", "queue_challenge", map[string]http.HandlerFunc{"GET": srv.queueChallenge})
	srv.handle("/api/v1/orders/{id}", "order", map[string]http.HandlerFunc{"GET": srv.getOrder})
	srv.handle("/api/v1/orders/{id}/pay", "pay", map[string]http.HandlerFunc{"POST": srv.payOrder})
	srv.handle("/api/v1/orders/{id}/cancel", "cancel", map[string]http.HandlerFunc{"POST": srv.cancelOrder})
	srv.handle("/api/v1/users/me/orders", "my_orders", map[string]http.HandlerFunc{"GET": srv.myOrders})
	srv.handle("/api/v1/openapi.json", "openapi", map[string]http.HandlerFunc{"GET": serveOpenAPI})
	if srv.blocklist != nil {
		srv.routeBlocks()
	}
	srv.handle("/healthz", "healthz", map[string]http.HandlerFunc{"GET": srv.healthz})
	if gatherer != nil {
		srv.handle("/metrics", "metrics", map[string]http.HandlerFunc{"GET": srv.metrics(gatherer)})
	}
	srv.mux.Handle("/", srv.limited(http.HandlerFunc(notFound)))
	return srv
}

// metrics serves gatherer's metrics to the admin: they tell the sales'
// rates and stock, and a stranger has no business reading them. A
// Prometheus that has no token scrapes serve's --metrics-listen.
func (s *Server) metrics(gatherer prometheus.Gatherer) http.HandlerFunc {
	h := promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{})
	return func(w http.ResponseWriter, r *http.Request) {
		if err := s.admin(r); err != nil {
			writeError(w, err)
			return
		}
		h.ServeHTTP(w, r)
	}
}

// Mount serves h under prefix (a path ending in /, and the path without
// the slash), behind the rate per client address, as every route is.
func (s *Server) Mount(prefix string, h http.Handler) {
	h = s.limited(h)
	s.mux.Handle(prefix, h)
	s.mux.Handle(strings.TrimSuffix(prefix, "/"), h)
}

// limited applies the rate per client address to the requests of h.
func (s *Server) limited(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := s.limitAddr(r.Context(), netHeader(r.Header), func() netip.Addr { return s.clientAddr(r) }); err != nil {
			writeError(w, err)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// notFound answers a path the API does not serve. The message does not
// repeat the path: it is the client's, of any length. A body is not read:
// the connection closes after the answer (see statusWriter).
func notFound(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength != 0 {
		w.Header().Set("Connection", "close")
	}
	writeError(w, errNoEndpoint)
}

var errNoEndpoint = seckill.Errorf(seckill.ENOTFOUND, "no such endpoint")

// ServeHTTP serves the API. A path that is not clean (//, /./, /../) is
// not found, rather than redirected as ServeMux would, with an HTML body;
// so is a path with a % escape, which ServeMux would decode (paths match
// as sent: see strict.go).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !cleanPath(r.URL.Path) || encodedPath(r.URL) {
		notFound(w, r)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// Latency is the request latency histogram (by route and status class), for
// a reader that wants it alone, such as the dashboard, which reads it at
// every tick.
func (s *Server) Latency() *prometheus.HistogramVec { return s.latency }

type activityRequest struct {
	Name  string `json:"name"`
	Stock int64  `json:"stock"`
	// The times are pointers to tell one left out from one sent as the
	// zero time (0001-01-01T00:00:00Z, out of range).
	StartsAt *time.Time `json:"starts_at"`
	EndsAt   *time.Time `json:"ends_at"`
	// PayWithinSeconds is the payment window (default 900: 15 minutes;
	// 0: no payment step). Rebuy lets a buyer whose order was cancelled
	// or expired buy again (default true).
	PayWithinSeconds *int64 `json:"pay_within_seconds"`
	Rebuy            *bool  `json:"rebuy"`
	// Buckets splits the stock in Redis over that many buckets, for a
	// sale that needs the cores of several Redis Cluster masters (default
	// 1; see seckill.Activity.Buckets).
	Buckets *int `json:"buckets"`
	// Queue puts the sale behind a waiting room (default none; see
	// queue.go).
	Queue *queueRequest `json:"queue"`
}

// defaultPayWithin is the payment window of a sale created without one.
const defaultPayWithin = 15 * time.Minute

// activityBody is an activity as the API shows it.
type activityBody struct {
	seckill.Activity
	PayWithinSeconds int64 `json:"pay_within_seconds"`
	Rebuy            bool  `json:"rebuy"`
	Buckets          int   `json:"buckets"`
	// Queue is the sale's waiting room, null without one.
	Queue *queueRequest `json:"queue"`
}

func newActivityBody(a seckill.Activity) activityBody {
	b := activityBody{Activity: a, PayWithinSeconds: int64(a.PayWithin / time.Second), Rebuy: a.Rebuy, Buckets: a.BucketCount()}
	if a.QueueRate > 0 {
		b.Queue = &queueRequest{Rate: a.QueueRate, Hold: a.QueueHold}
	}
	return b
}

func (s *Server) createActivity(w http.ResponseWriter, r *http.Request) {
	if err := s.admin(r); err != nil {
		writeError(w, err)
		return
	}
	var req activityRequest
	if err := decode(r, &req); err != nil {
		writeError(w, err)
		return
	}
	if req.StartsAt == nil || req.EndsAt == nil {
		writeError(w, seckill.Errorf(seckill.EINVALID, "starts_at and ends_at are required"))
		return
	}
	a := seckill.Activity{Name: req.Name, Stock: req.Stock, StartsAt: req.StartsAt.UTC(), EndsAt: req.EndsAt.UTC(),
		PayWithin: defaultPayWithin, Rebuy: true}
	if req.PayWithinSeconds != nil {
		if *req.PayWithinSeconds < 0 || *req.PayWithinSeconds > int64(seckill.MaxPayWithin/time.Second) {
			writeError(w, seckill.Errorf(seckill.EINVALID, "pay_within_seconds must lie between 0 and %d", int64(seckill.MaxPayWithin/time.Second)))
			return
		}
		a.PayWithin = time.Duration(*req.PayWithinSeconds) * time.Second
	}
	if req.Rebuy != nil {
		a.Rebuy = *req.Rebuy
	}
	if req.Buckets != nil {
		if *req.Buckets < 1 {
			writeError(w, seckill.Errorf(seckill.EINVALID, "buckets must lie between 1 and %d", seckill.MaxBuckets))
			return
		}
		a.Buckets = *req.Buckets
	}
	if q := req.Queue; q != nil {
		if q.Rate < 1 {
			writeError(w, seckill.Errorf(seckill.EINVALID, "queue.rate must lie between 1 and %d", seckill.MaxQueueRate))
			return
		}
		a.QueueRate, a.QueueHold = q.Rate, q.Hold
	}
	if err := a.Validate(); err != nil {
		writeError(w, err)
		return
	}
	if !a.EndsAt.After(time.Now()) {
		// A sale over before it exists is a mistake, and would still
		// be loaded into Redis (where its keys were seen to stay).
		writeError(w, seckill.Errorf(seckill.EINVALID, "ends_at is in the past: the sale would be over before it is created"))
		return
	}
	if err := s.sale.CreateActivity(r.Context(), &a); err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, newActivityBody(a))
}

func (s *Server) getActivity(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "activity")
	if err != nil {
		writeError(w, err)
		return
	}
	a, err := s.sale.Activity(r.Context(), id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, newActivityBody(a))
}

func (s *Server) grab(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "activity")
	if err != nil {
		writeError(w, err)
		return
	}
	var buf [64]byte
	status, b, err := s.grabOf(r.Context(), id, netHeader(r.Header), buf[:0])
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header()["Content-Type"] = jsonType
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// grabOf grabs a unit of activity id for the caller the header names, and
// returns the answer's status and body (appended to buf), or the error to
// answer. It is the grab of both server fronts (see fast.go).
func (s *Server) grabOf(ctx context.Context, id int64, h header, buf []byte) (int, []byte, error) {
	c, err := s.callerOf(ctx, h)
	if err != nil {
		return 0, nil, err
	}
	if c.Admin {
		return 0, nil, seckill.Errorf(seckill.EINVALID, "the admin does not grab: send the buyer's identity")
	}
	var pass string
	if v := h.values(passHeader); len(v) > 0 {
		pass = v[0]
	}
	g, err := s.sale.GrabWithPass(ctx, id, c.UserID, pass)
	if err != nil {
		return 0, nil, err
	}
	status := http.StatusAccepted
	if !g.New {
		status = http.StatusOK
	}
	// The hot path's reply, written by hand: it is the same few bytes for
	// every buyer, and encoding/json would cost more than the grab. A new
	// order is pending (accepted, not yet written); of an order the buyer
	// already holds the grab knows only the id, not what became of it (it
	// may be paid, or expired), so it claims no state: GET /orders/{id}.
	b := append(buf, `{"order_id":"`...)
	b = strconv.AppendInt(b, g.OrderID, 10)
	if g.New {
		b = append(b, `","status":"pending"}`+"\n"...)
	} else {
		b = append(b, `"}`+"\n"...)
	}
	return status, b, nil
}

var (
	jsonType     = []string{"application/json"}
	bearerRealm  = []string{`Bearer realm="seckill"`}
	invalidToken = []string{`Bearer realm="seckill", error="invalid_token"`}
)

// fail answers an error from the service, logging the internal ones.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	s.logInternal(r.Method, r.URL.Path, err)
	writeError(w, err)
}

func (s *Server) logInternal(method, path string, err error) {
	if seckill.ErrorCode(err) == seckill.EINTERNAL {
		s.log.Error("request failed", "method", method, "path", path, "err", err)
	}
}

// decode reads a JSON body into v, strictly: Content-Type application/json
// (415 otherwise), within the body limit route sets (413 beyond it), valid
// UTF-8 (400 otherwise: encoding/json would store U+FFFD instead), one
// value, no unknown field, no key twice and every name as declared (see
// checkKeys).
func decode(r *http.Request, v any) error {
	if err := jsonContent(r.Header); err != nil {
		return err
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		if tooBig, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return seckill.Errorf(codeTooLarge, "the request body exceeds %d bytes", tooBig.Limit)
		}
		return seckill.Errorf(seckill.EINVALID, "the request body could not be read")
	}
	if !utf8.Valid(body) {
		return seckill.Errorf(seckill.EINVALID, "the request body is not valid UTF-8")
	}
	if loneSurrogate(body) {
		return seckill.Errorf(seckill.EINVALID, "the request body escapes a lone UTF-16 surrogate (\\ud800 to \\udfff, unpaired)")
	}
	if err := checkKeys(body, v); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var syn *json.SyntaxError
		var typ *json.UnmarshalTypeError
		var tim *time.ParseError
		switch {
		case errors.Is(err, io.EOF):
			return seckill.Errorf(seckill.EINVALID, "the request body is empty")
		case errors.As(err, &typ):
			return seckill.Errorf(seckill.EINVALID, "field %q has the wrong type", typ.Field)
		case errors.As(err, &tim):
			return seckill.Errorf(seckill.EINVALID, "times must be RFC 3339, such as 2026-11-30T10:00:00Z")
		case errors.As(err, &syn):
			return seckill.Errorf(seckill.EINVALID, "the request body is not valid JSON")
		}
		return seckill.Errorf(seckill.EINVALID, "bad request body: %.200s", strings.TrimPrefix(err.Error(), "json: "))
	}
	if dec.More() {
		return seckill.Errorf(seckill.EINVALID, "the request body holds more than one JSON value")
	}
	return nil
}

// loneSurrogate reports whether a JSON text escapes a UTF-16 surrogate
// that is not half of a pair (such as "\ud800"): encoding/json would store
// U+FFFD in its place, as silently as for invalid UTF-8. Escapes that are
// not well formed are left to the decoder.
func loneSurrogate(b []byte) bool {
	for i := 0; i < len(b)-1; i++ {
		if b[i] != '\\' {
			continue
		}
		i++ // the escaped character: a \\ is skipped whole
		r, ok := escapedUnit(b[i:])
		if !ok || !utf16.IsSurrogate(r) {
			continue
		}
		if r >= 0xdc00 { // a low surrogate first
			return true
		}
		if len(b) < i+7 || b[i+5] != '\\' {
			return true
		}
		if lo, ok := escapedUnit(b[i+6:]); !ok || lo < 0xdc00 || lo > 0xdfff {
			return true
		}
		i += 10 // the pair's second escape
	}
	return false
}

// escapedUnit reads the code unit of an escape "uXXXX" at the start of b.
func escapedUnit(b []byte) (rune, bool) {
	if len(b) < 5 || b[0] != 'u' {
		return 0, false
	}
	var r rune
	for _, c := range b[1:5] {
		switch {
		case '0' <= c && c <= '9':
			r = r<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// jsonContent requires Content-Type application/json (a charset, if
// given, must be UTF-8).
func jsonContent(h http.Header) error {
	mt, params, err := mime.ParseMediaType(h.Get("Content-Type"))
	if err != nil || mt != "application/json" || (params["charset"] != "" && !strings.EqualFold(params["charset"], "utf-8")) {
		return seckill.Errorf(codeMediaType, "the request body must be JSON, sent with Content-Type: application/json")
	}
	return nil
}

// pathID parses the {id} path value: a positive decimal integer.
func pathID(r *http.Request, what string) (int64, error) {
	id, ok := parsePositive(r.PathValue("id"))
	if !ok {
		return 0, seckill.Errorf(seckill.EINVALID, "%s id must be a positive integer", what)
	}
	return id, nil
}

// parsePositive accepts only the canonical decimal form (no sign, no leading
// zeros), so that one user or order has one spelling.
func parsePositive(s string) (int64, bool) { return auth.ParseID(s) }

func errorBody(code, message string) any {
	return map[string]any{"error": map[string]string{"code": code, "message": message}}
}

func writeError(w http.ResponseWriter, err error) {
	a := errorAnswerOf(err)
	h := w.Header()
	h["Content-Type"] = jsonType
	if a.authenticate != nil {
		h["Www-Authenticate"] = a.authenticate
	}
	if a.retryAfter != "" {
		h.Set("Retry-After", a.retryAfter)
	}
	w.WriteHeader(a.status)
	_, _ = w.Write(a.body)
}

// errorAnswer is the answer to an error, whichever server front writes it.
type errorAnswer struct {
	status       int
	body         []byte
	authenticate []string // WWW-Authenticate, with 401
	retryAfter   string   // Retry-After, with 429 and 503 refusals
}

func errorAnswerOf(err error) errorAnswer {
	code := seckill.ErrorCode(err)
	a := errorAnswer{status: http.StatusInternalServerError, body: errorJSON(code, seckill.ErrorMessage(err))}
	if status, ok := codes[code]; ok {
		a.status = status
	}
	switch {
	case a.status == http.StatusUnauthorized:
		if code == codeTokenExpired || code == codeTokenInvalid {
			a.authenticate = invalidToken
		} else {
			a.authenticate = bearerRealm
		}
	case a.status == http.StatusTooManyRequests || a.status == http.StatusServiceUnavailable:
		if r, ok := errors.AsType[*refusal](err); ok {
			a.retryAfter = retryAfter(r.wait)
		}
	}
	return a
}

// errorCache keeps the encoded bodies of recurring errors: after a sell-out
// nearly every reply is the same sold_out body. Lookups do not allocate.
var errorCache struct {
	sync.RWMutex
	m map[errorKey][]byte
}

type errorKey struct{ code, message string }

const maxCachedMessage = 128

func errorJSON(code, message string) []byte {
	k := errorKey{code, message}
	errorCache.RLock()
	b, ok := errorCache.m[k]
	errorCache.RUnlock()
	if ok {
		return b
	}
	b, _ = json.Marshal(errorBody(code, message))
	b = append(b, '\n')
	errorCache.Lock()
	if errorCache.m == nil {
		errorCache.m = map[errorKey][]byte{}
	}
	// Messages naming ids vary, and some carry client input: keep only
	// short ones, and few of them (at most about 300 KB).
	if len(errorCache.m) < 1000 && len(message) <= maxCachedMessage {
		errorCache.m[k] = b
	}
	errorCache.Unlock()
	return b
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header()["Content-Type"] = jsonType
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
