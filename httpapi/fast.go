package httpapi

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/valyala/fasthttp"
)

// The fast front. In a sale nearly every request is a grab, and net/http
// costs more per request than the grab's own work (measured with wrk: a
// bare net/http handler answering the grab's request with the sold-out
// answer reaches about 0.8 of the bare GET it is compared with). serve
// therefore listens with fasthttp, answers the grab route here, natively,
// and passes every other request to ServeHTTP through fasthttpadaptor.
// ServeFast applies what handle and caller apply to a grab on net/http, in
// the same order and with the same functions: requests in flight, the rate
// per client address, the body limit, identity, blocklist, rate per user;
// and it observes the same latency histogram.

// ServeFast serves a request of a fasthttp server if it is a grab (POST
// /api/v1/activities/{id}/grab, the path in its clean form, the id in its
// canonical one, no query) and reports whether it did; any other request
// is the caller's to pass to ServeHTTP, which answers it as it always does
// (malformed grab paths and wrong methods included). A request whose body
// comes with two Content-Types is refused here, whatever its route: the
// request ServeHTTP gets has only the last.
func (s *Server) ServeFast(ctx *fasthttp.RequestCtx) bool {
	if len(ctx.Request.Body()) > 0 && repeatedContentType(ctx.Request.Header.RawHeaders()) {
		// fasthttp keeps the last of two: ServeHTTP could not tell.
		FastError(ctx, errContentTypeTwice)
		return true
	}
	if !ctx.IsPost() {
		return false
	}
	id, ok := grabPath(ctx.Request.URI().PathOriginal())
	if !ok || len(ctx.Request.URI().QueryString()) > 0 { // a query: checkQuery's
		return false
	}
	began := time.Now()
	s.grabLatency.observe(s.fastGrab(ctx, id), began)
	return true
}

var (
	grabPrefix = []byte("/api/v1/activities/")
	grabSuffix = []byte("/grab")
	jsonBytes  = []byte("application/json")
)

// grabPath parses a grab's path as sent: /api/v1/activities/{id}/grab with
// nothing encoded and the id a positive integer in canonical form.
func grabPath(p []byte) (int64, bool) {
	rest, ok := bytes.CutPrefix(p, grabPrefix)
	if !ok {
		return 0, false
	}
	digits, ok := bytes.CutSuffix(rest, grabSuffix)
	if !ok {
		return 0, false
	}
	return parsePositive(string(digits))
}

// fastGrab answers a grab and returns its status: the checks of serve
// (guard.go), then the grab route's.
func (s *Server) fastGrab(ctx *fasthttp.RequestCtx, id int64) int {
	if err := s.enter(); err != nil {
		return FastError(ctx, err)
	}
	defer s.leave()
	h := fastHeader{&ctx.Request.Header}
	if err := s.limitAddr(ctx, h, func() netip.Addr { return s.addrOf(peerAddr(ctx.RemoteAddr()), h) }); err != nil {
		return FastError(ctx, err)
	}
	// fasthttp has read the body already, within the server's bound (the
	// API's may be lower): a grab takes none.
	if n := len(ctx.Request.Body()); n > 0 {
		err := s.bound(int64(n))
		if err == nil {
			err = errNoBody
		}
		return FastError(ctx, err)
	}
	var buf [64]byte
	status, b, err := s.grabOf(ctx, id, h, buf[:0])
	if err != nil {
		s.logInternal(http.MethodPost, string(ctx.Path()), err)
		return FastError(ctx, err)
	}
	ctx.Response.Header.SetContentTypeBytes(jsonBytes)
	ctx.SetStatusCode(status)
	ctx.SetBody(b)
	return status
}

// FastError writes the answer to err on a fasthttp request, as writeError
// does on net/http, and returns its status. serve uses it too, for what
// its server refuses before any handler (a body too large).
func FastError(ctx *fasthttp.RequestCtx, err error) int {
	a := errorAnswerOf(err)
	ctx.Response.Header.SetContentTypeBytes(jsonBytes)
	for _, v := range a.authenticate {
		ctx.Response.Header.Add("WWW-Authenticate", v)
	}
	if a.retryAfter != "" {
		ctx.Response.Header.Set("Retry-After", a.retryAfter)
	}
	ctx.SetStatusCode(a.status)
	ctx.SetBody(a.body)
	return a.status
}

// fastHeader is a fasthttp request's header, as the guards read it.
type fastHeader struct{ h *fasthttp.RequestHeader }

func (h fastHeader) values(key string) []string {
	all := h.h.PeekAll(key)
	if len(all) == 0 {
		return nil
	}
	v := make([]string, len(all))
	for i, b := range all {
		v[i] = string(b)
	}
	return v
}

// peerAddr is the address of a connection's peer.
func peerAddr(a net.Addr) netip.Addr {
	if t, ok := a.(*net.TCPAddr); ok {
		ip, _ := netip.AddrFromSlice(t.IP)
		return ip
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr()
}

// RawError is the whole HTTP/1.1 answer to err, as the API answers it, with
// Connection: close: for a connection refused before any server reads from
// it (serve's --max-conns).
func RawError(err error) []byte {
	a := errorAnswerOf(err)
	var b bytes.Buffer
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n",
		a.status, http.StatusText(a.status), len(a.body))
	for _, v := range a.authenticate {
		fmt.Fprintf(&b, "WWW-Authenticate: %s\r\n", v)
	}
	if a.retryAfter != "" {
		fmt.Fprintf(&b, "Retry-After: %s\r\n", a.retryAfter)
	}
	b.WriteString("\r\n")
	b.Write(a.body)
	return b.Bytes()
}
