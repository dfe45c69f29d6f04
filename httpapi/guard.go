package httpapi

import (
	"context"
	"io"
	"net/http"
	"net/netip"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckilldev/seckill"
)

// What a hostile client cannot get past: every request passes handle,
// which bounds the requests in flight, the body size, and the rate per
// client address, before any handler runs; handlers that name a user then
// pass caller (identity.go), which applies the blocklist and the rate per
// user. Nothing here touches Redis or the database, except a cluster-wide
// limiter, which costs one round trip.

// Option configures a Server.
type Option func(*Server)

// Limiter decides whether one more request of key k may pass now, and if
// not, how long the client should wait. package limit implements it.
type Limiter[K comparable] interface {
	Allow(ctx context.Context, k K) (ok bool, wait time.Duration)
}

// Blocklist is the set of blocked users, checked on every request that
// names a user and changed through the admin API. package limit
// implements it.
type Blocklist interface {
	Blocked(uid int64) bool
	Block(ctx context.Context, uid int64) error
	Unblock(ctx context.Context, uid int64) error
	List(ctx context.Context) ([]int64, error)
}

// Verifier verifies a bearer token and returns the user it names; errors
// wrap auth.ErrExpired or auth.ErrInvalid. package auth implements it.
type Verifier interface {
	Verify(token string) (int64, error)
}

// Defaults of Limits.
const (
	DefaultMaxBody     = 64 << 10
	DefaultMaxInFlight = 4096
)

// Limits bound what one request may cost. Zero values take the defaults.
type Limits struct {
	// MaxBody bounds a request body, in bytes: larger ones get 413.
	// Default DefaultMaxBody.
	MaxBody int64
	// MaxInFlight bounds the requests being handled at once: beyond it a
	// request gets 503 overloaded at once, rather than queueing.
	// Default DefaultMaxInFlight.
	MaxInFlight int64
}

// WithLimits sets the request limits.
func WithLimits(l Limits) Option {
	return func(s *Server) {
		if l.MaxBody > 0 {
			s.maxBody = l.MaxBody
		}
		if l.MaxInFlight > 0 {
			s.maxInFlight = l.MaxInFlight
		}
	}
}

// WithVerifier makes buyers prove who they are with a bearer token
// (Authorization: Bearer <JWT>) instead of the X-User-ID header, which is
// then ignored.
func WithVerifier(v Verifier) Option { return func(s *Server) { s.verifier = v } }

// WithUserLimit limits the requests of each user.
func WithUserLimit(l Limiter[int64]) Option { return func(s *Server) { s.userLimit = l } }

// WithAddrLimit limits the requests of each client address (IPv6
// addresses by their /64, which one client usually holds whole). The
// admin is not limited.
func WithAddrLimit(l Limiter[netip.Addr]) Option { return func(s *Server) { s.addrLimit = l } }

// WithTrustedProxies names the proxies whose X-Forwarded-For is believed:
// the client address is the rightmost address in it that is not a trusted
// proxy. Without them, the client address is the connection's peer.
func WithTrustedProxies(p []netip.Prefix) Option { return func(s *Server) { s.trusted = p } }

// WithBlocklist refuses blocked users and serves the admin API that
// changes the list.
func WithBlocklist(b Blocklist) Option { return func(s *Server) { s.blocklist = b } }

// Error codes of this package; the domain's own are in package seckill.
const (
	codeRateLimited  = "rate_limited"           // 429, with Retry-After
	codeBlocked      = "blocked"                // 403
	codeTooLarge     = "too_large"              // 413
	codeMediaType    = "unsupported_media_type" // 415
	codeOverloaded   = "overloaded"             // 503, with Retry-After
	codeTokenMissing = "token_missing"          // 401
	codeTokenExpired = "token_expired"          // 401
	codeTokenInvalid = "token_invalid"          // 401
	codeTimeout      = "request_timeout"        // 408, from the server before any handler
	codeHeadersLarge = "headers_too_large"      // 431, from the server before any handler
	codeVersion      = "version_not_supported"  // 505, from the server before any handler
)

// refusal is an error answered with a Retry-After header.
type refusal struct {
	err  *seckill.Error
	wait time.Duration
}

func (r *refusal) Error() string { return r.err.Error() }
func (r *refusal) Unwrap() error { return r.err }

// retryAfter is the Retry-After value of a wait: whole seconds, rounded up,
// at least 1.
func retryAfter(wait time.Duration) string {
	return strconv.FormatInt(max(1, int64((wait+time.Second-1)/time.Second)), 10)
}

// refusals counts the requests refused before they reached a handler or
// the service, by reason.
type refusals struct {
	overloaded, addr, user, blocked, tooLarge prometheus.Counter
}

func newRefusals(reg prometheus.Registerer) refusals {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "seckill_http_refused_total",
		Help: "Requests refused before the service saw them, by reason.",
	}, []string{"reason"})
	if reg != nil {
		reg.MustRegister(v)
	}
	return refusals{overloaded: v.WithLabelValues("overloaded"), addr: v.WithLabelValues("rate_limited_addr"),
		user: v.WithLabelValues("rate_limited_user"), blocked: v.WithLabelValues("blocked"), tooLarge: v.WithLabelValues("too_large")}
}

var errOverloaded = &refusal{seckill.Errorf(codeOverloaded, "the service is at its limit of requests in flight; retry shortly"), time.Second}

// TooManyConns is the refusal of a connection beyond the server's bound
// (503 overloaded, Retry-After: 1).
func TooManyConns() error {
	return &refusal{seckill.Errorf(codeOverloaded, "the service is at its limit of open connections; retry shortly"), time.Second}
}

// handle registers a path whose methods are dispatched here (a wrong
// method gets a JSON 405 like every other error), behind the limits every
// request passes: requests in flight, body size, rate per client address.
// Probes (/healthz, /metrics) too: a load balancer or scraper polls from a
// few addresses, well below any sensible --ip-rate, and a scraper with the
// admin token is not limited.
func (s *Server) handle(pattern, name string, methods map[string]http.HandlerFunc) {
	s.routes = append(s.routes, newRoute(pattern, name, methods))
	allow := make([]string, 0, len(methods)+1)
	for m := range methods {
		allow = append(allow, m)
	}
	if methods[http.MethodGet] != nil && methods[http.MethodHead] == nil {
		allow = append(allow, http.MethodHead)
	}
	allowed := strings.Join(allow, ", ")
	latency := s.routeLatency(name)
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		began := time.Now()
		sw := statusWriter{ResponseWriter: w, status: http.StatusOK}
		s.serve(&sw, r, methods, allowed)
		latency.observe(sw.status, began)
	})
}

// routeLatency is a route's part of the latency histogram.
type routeLatency struct {
	vec  *prometheus.HistogramVec
	name string
	// The classes this API answers, resolved once; a 1xx or 3xx would be
	// a surprise and is looked up when it happens.
	classes map[int]prometheus.Observer
}

func (s *Server) routeLatency(name string) routeLatency {
	l := routeLatency{vec: s.latency, name: name, classes: map[int]prometheus.Observer{}}
	for _, class := range []int{2, 4, 5} {
		l.classes[class] = s.latency.WithLabelValues(name, strconv.Itoa(class)+"xx")
	}
	return l
}

// observe records a request answered with status that began then.
func (l routeLatency) observe(status int, began time.Time) {
	o := l.classes[status/100]
	if o == nil {
		o = l.vec.WithLabelValues(l.name, strconv.Itoa(status/100)+"xx")
	}
	o.Observe(time.Since(began).Seconds())
}

func (s *Server) serve(w *statusWriter, r *http.Request, methods map[string]http.HandlerFunc, allowed string) {
	// The body first: any answer given before it is read, a refusal
	// below included, then closes the connection (see statusWriter).
	if r.ContentLength != 0 { // a body, of known length or chunked
		b := &body{ReadCloser: http.MaxBytesReader(w.ResponseWriter, r.Body, s.maxBody)}
		r.Body, w.body = b, b
	}
	if err := s.enter(); err != nil {
		writeError(w, err)
		return
	}
	defer s.leave()
	h := methods[r.Method]
	if h == nil && r.Method == http.MethodHead {
		h = methods[http.MethodGet]
	}
	if h == nil {
		w.Header().Set("Allow", allowed)
		writeError(w, seckill.Errorf("method_not_allowed", "%.20s is not allowed here", r.Method))
		return
	}
	if err := s.limitAddr(r.Context(), netHeader(r.Header), func() netip.Addr { return s.clientAddr(r) }); err != nil {
		writeError(w, err)
		return
	}
	if err := s.bound(r.ContentLength); err != nil {
		writeError(w, err)
		return
	}
	if err := checkRequest(r); err != nil {
		writeError(w, err)
		return
	}
	h(w, r)
}

// The checks of every API request, in this order, on both server fronts
// (see fast.go): enter (requests in flight; leave when done), limitAddr,
// bound, then the strict edges (strict.go).

func (s *Server) enter() error {
	if s.inFlight.Add(1) > s.maxInFlight {
		s.inFlight.Add(-1)
		s.refused.overloaded.Inc()
		return errOverloaded
	}
	return nil
}

func (s *Server) leave() { s.inFlight.Add(-1) }

// limitAddr applies the rate per client address (addr, asked only when
// there is a limit) to a request that does not carry the admin token.
func (s *Server) limitAddr(ctx context.Context, h header, addr func() netip.Addr) error {
	if s.addrLimit == nil || s.isAdmin(h) {
		return nil
	}
	if ok, wait := s.addrLimit.Allow(ctx, addr()); !ok {
		s.refused.addr.Inc()
		return &refusal{seckill.Errorf(codeRateLimited, "too many requests from this address"), wait}
	}
	return nil
}

// bound refuses a body of n bytes beyond the API's bound.
func (s *Server) bound(n int64) error {
	if n > s.maxBody {
		s.refused.tooLarge.Inc()
		return TooLarge(s.maxBody)
	}
	return nil
}

// TooLarge is the error of a body beyond limit bytes (413 too_large).
func TooLarge(limit int64) error {
	return seckill.Errorf(codeTooLarge, "the request body exceeds %d bytes", limit)
}

// RequestTimeout, HeadersTooLarge and Malformed are the refusals of the
// HTTP server itself, before any handler, in the API's error shape.

// RequestTimeout: a request not received in time (408 request_timeout).
func RequestTimeout() error {
	return seckill.Errorf(codeTimeout, "the request was not received in time")
}

// HeadersTooLarge: a request line and headers beyond limit bytes (431
// headers_too_large).
func HeadersTooLarge(limit int) error {
	return seckill.Errorf(codeHeadersLarge, "the request line and headers exceed %d bytes", limit)
}

// Malformed: a request that is not HTTP/1.1 (400 invalid_argument).
func Malformed() error {
	return seckill.Errorf(seckill.EINVALID, "the request is not well-formed HTTP/1.1")
}

// BareLF: a request line or header ended by a bare LF, not CRLF (400
// invalid_argument): parsers differ on where such a line ends.
func BareLF() error {
	return seckill.Errorf(seckill.EINVALID, "the request line and headers must end each line with CRLF, not a bare LF")
}

// VersionNotSupported: a request of an HTTP version other than 1.0 and
// 1.1 (505 version_not_supported).
func VersionNotSupported() error {
	return seckill.Errorf(codeVersion, "only HTTP/1.1 and HTTP/1.0 are served")
}

// body is a request body bounded in size that remembers whether it was
// read to its end.
type body struct {
	io.ReadCloser
	done bool
}

func (b *body) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.done = true
	}
	return n, err
}

type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
	body   *body // the request's, if it has one
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
		if w.body != nil && !w.body.done {
			// A body the handler left unread (a grab with a body, or a
			// request refused before its body was needed): net/http
			// would read it before sending the answer, so a client
			// trickling it would hold its own answer back. Answer now,
			// and close the connection after.
			w.Header().Set("Connection", "close")
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK) // the implicit header passes the check too
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// cleanPath reports whether p is in the form ServeMux would not redirect:
// rooted, without //, /./ or /../ (a trailing slash is kept).
func cleanPath(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	c := path.Clean(p)
	if p[len(p)-1] == '/' && c != "/" {
		c += "/"
	}
	return c == p
}

// clientAddr is the address a request is limited by: the connection's
// peer, or, when the peer is a trusted proxy, the rightmost address of
// X-Forwarded-For that is not one (each proxy appends the address it
// heard from, so only the addresses a trusted proxy added can be believed).
// IPv6 addresses are taken by their /64.
func (s *Server) clientAddr(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	return s.addrOf(ap.Addr(), netHeader(r.Header))
}

// addrOf is clientAddr for a request of either server front, from the
// connection's peer.
func (s *Server) addrOf(peer netip.Addr, h header) netip.Addr {
	a := peer.Unmap()
	if !a.IsValid() {
		return a
	}
	if s.isTrusted(a) {
		a = s.forwardedFor(h.values("X-Forwarded-For"), a)
	}
	if a.Is6() {
		a = netip.PrefixFrom(a, 64).Masked().Addr()
	}
	return a
}

// forwardedFor walks X-Forwarded-For from the right, starting at the
// trusted peer, to the first address that is not a trusted proxy. An entry
// that is not an address stops the walk at the proxy that passed it.
func (s *Server) forwardedFor(values []string, peer netip.Addr) netip.Addr {
	a := peer
	for i := len(values) - 1; i >= 0; i-- {
		v := values[i]
		for v != "" {
			var part string
			if j := strings.LastIndexByte(v, ','); j >= 0 {
				v, part = v[:j], v[j+1:]
			} else {
				v, part = "", v
			}
			part = strings.TrimSpace(part)
			if part == "" {
				continue
			}
			x, err := netip.ParseAddr(part)
			if err != nil {
				ap, err := netip.ParseAddrPort(part)
				if err != nil {
					return a
				}
				x = ap.Addr()
			}
			a = x.Unmap()
			if !s.isTrusted(a) {
				return a
			}
		}
	}
	return a
}

func (s *Server) isTrusted(a netip.Addr) bool {
	for _, p := range s.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
