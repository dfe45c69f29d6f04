// Package httpapi is the JSON HTTP API of seckill. Only this package maps
// error codes to HTTP statuses.
package httpapi

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/seckilldev/seckill"
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
}

// Health checks a dependency; nil means healthy.
type Health func(ctx context.Context) error

// Server serves the API.
type Server struct {
	sale       *sale.Service
	adminToken string
	health     map[string]Health
	log        *slog.Logger
	latency    *prometheus.HistogramVec
	mux        *http.ServeMux
}

// New returns the API handler. gatherer serves /metrics (nil: none);
// registerer receives the API's own metrics (nil: none).
func New(s *sale.Service, adminToken string, health map[string]Health, log *slog.Logger,
	registerer prometheus.Registerer, gatherer prometheus.Gatherer) *Server {
	srv := &Server{sale: s, adminToken: adminToken, health: health, log: log, mux: http.NewServeMux(),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "seckill_http_request_seconds",
			Help:    "HTTP request latency by route and status class.",
			Buckets: []float64{.0002, .0005, .001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5},
		}, []string{"route", "code"})}
	if registerer != nil {
		registerer.MustRegister(srv.latency)
	}
	srv.route("/api/v1/activities", "activities", map[string]http.HandlerFunc{"POST": srv.createActivity})
	srv.route("/api/v1/activities/{id}", "activity", map[string]http.HandlerFunc{"GET": srv.getActivity})
	srv.route("/api/v1/activities/{id}/grab", "grab", map[string]http.HandlerFunc{"POST": srv.grab})
	srv.route("/api/v1/orders/{id}", "order", map[string]http.HandlerFunc{"GET": srv.getOrder})
	srv.route("/healthz", "healthz", map[string]http.HandlerFunc{"GET": srv.healthz})
	if gatherer != nil {
		srv.mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	}
	srv.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, seckill.Errorf(seckill.ENOTFOUND, "no such endpoint: %s", r.URL.Path))
	})
	return srv
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// route registers a path whose methods are dispatched here, so that a wrong
// method gets a JSON 405 like every other error.
func (s *Server) route(pattern, name string, methods map[string]http.HandlerFunc) {
	allow := make([]string, 0, len(methods))
	for m := range methods {
		allow = append(allow, m)
	}
	// The classes this API answers, resolved once; a 1xx or 3xx would be
	// a surprise and is looked up when it happens.
	observers := map[int]prometheus.Observer{}
	for _, class := range []int{2, 4, 5} {
		observers[class] = s.latency.WithLabelValues(name, strconv.Itoa(class)+"xx")
	}
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		began := time.Now()
		sw := statusWriter{ResponseWriter: w, status: http.StatusOK}
		h := methods[r.Method]
		if h == nil && r.Method == http.MethodHead {
			h = methods[http.MethodGet]
		}
		if h == nil {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			writeJSON(&sw, http.StatusMethodNotAllowed, errorBody("method_not_allowed", r.Method+" is not allowed here"))
		} else {
			h(&sw, r)
		}
		o := observers[sw.status/100]
		if o == nil {
			o = s.latency.WithLabelValues(name, strconv.Itoa(sw.status/100)+"xx")
		}
		o.Observe(time.Since(began).Seconds())
	})
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

type activityRequest struct {
	Name     string    `json:"name"`
	Stock    int64     `json:"stock"`
	StartsAt time.Time `json:"starts_at"`
	EndsAt   time.Time `json:"ends_at"`
}

func (s *Server) createActivity(w http.ResponseWriter, r *http.Request) {
	if !s.isAdmin(r) {
		writeError(w, seckill.Errorf(seckill.EUNAUTHORIZED, "an admin bearer token is required"))
		return
	}
	var req activityRequest
	if err := decode(r, &req); err != nil {
		writeError(w, err)
		return
	}
	a := seckill.Activity{Name: req.Name, Stock: req.Stock, StartsAt: req.StartsAt, EndsAt: req.EndsAt}
	if err := s.sale.CreateActivity(r.Context(), &a); err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, a)
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
	writeJSON(w, http.StatusOK, a)
}

type orderBody struct {
	OrderID    string              `json:"order_id"`
	ActivityID int64               `json:"activity_id,omitempty"`
	UserID     string              `json:"user_id,omitempty"`
	Status     seckill.OrderStatus `json:"status"`
	Reason     string              `json:"reason,omitempty"`
}

func (s *Server) grab(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "activity")
	if err != nil {
		writeError(w, err)
		return
	}
	uid, err := userID(r)
	if err != nil {
		writeError(w, err)
		return
	}
	g, err := s.sale.Grab(r.Context(), id, uid)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	status := http.StatusAccepted
	if !g.New {
		status = http.StatusOK
	}
	// The hot path's reply, written by hand: it is the same few bytes for
	// every buyer, and encoding/json would cost more than the grab.
	var buf [64]byte
	b := append(buf[:0], `{"order_id":"`...)
	b = strconv.AppendInt(b, g.OrderID, 10)
	b = append(b, `","status":"pending"}`+"\n"...)
	w.Header()["Content-Type"] = jsonType
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

var jsonType = []string{"application/json"}

func (s *Server) getOrder(w http.ResponseWriter, r *http.Request) {
	oid, err := pathID(r, "order")
	if err != nil {
		writeError(w, err)
		return
	}
	var uid int64
	if !s.isAdmin(r) {
		if uid, err = userID(r); err != nil {
			writeError(w, err)
			return
		}
	}
	o, err := s.sale.Order(r.Context(), oid, uid)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, orderBody{OrderID: strconv.FormatInt(o.ID, 10), ActivityID: o.ActivityID,
		UserID: strconv.FormatInt(o.UserID, 10), Status: o.Status, Reason: o.Reason})
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	checks := map[string]string{}
	status := http.StatusOK
	for name, check := range s.health {
		if err := check(ctx); err != nil {
			checks[name] = err.Error()
			status = http.StatusServiceUnavailable
		} else {
			checks[name] = "ok"
		}
	}
	writeJSON(w, status, map[string]any{"status": map[bool]string{true: "ok", false: "unavailable"}[status == http.StatusOK], "checks": checks})
}

func (s *Server) isAdmin(r *http.Request) bool {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && s.adminToken != "" && subtle.ConstantTimeCompare([]byte(token), []byte(s.adminToken)) == 1
}

// fail answers an error from the service, logging the internal ones.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	if seckill.ErrorCode(err) == seckill.EINTERNAL {
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	writeError(w, err)
}

// decode reads a JSON body of at most 64 KiB into v, strictly.
func decode(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, 64<<10))
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
		return seckill.Errorf(seckill.EINVALID, "bad request body: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	if dec.More() {
		return seckill.Errorf(seckill.EINVALID, "the request body holds more than one JSON value")
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

// userID parses X-User-ID, set by the shop's auth gateway.
func userID(r *http.Request) (int64, error) {
	v := r.Header.Get("X-User-ID")
	if v == "" {
		return 0, seckill.Errorf(seckill.EINVALID, "the X-User-ID header is required")
	}
	id, ok := parsePositive(v)
	if !ok {
		return 0, seckill.Errorf(seckill.EINVALID, "X-User-ID must be a positive 64-bit integer")
	}
	return id, nil
}

// parsePositive accepts only the canonical decimal form (no sign, no leading
// zeros), so that one user or order has one spelling.
func parsePositive(s string) (int64, bool) {
	if s == "" || len(s) > 19 || s[0] == '0' {
		return 0, false
	}
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

func errorBody(code, message string) any {
	return map[string]any{"error": map[string]string{"code": code, "message": message}}
}

func writeError(w http.ResponseWriter, err error) {
	code := seckill.ErrorCode(err)
	status, ok := codes[code]
	if !ok {
		status = http.StatusInternalServerError
	}
	body := errorJSON(code, seckill.ErrorMessage(err))
	w.Header()["Content-Type"] = jsonType
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// errorCache keeps the encoded bodies of recurring errors: after a sell-out
// nearly every reply is the same sold_out body. Lookups do not allocate.
var errorCache struct {
	sync.RWMutex
	m map[errorKey][]byte
}

type errorKey struct{ code, message string }

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
	if len(errorCache.m) < 1000 { // messages naming ids vary: keep it bounded
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
