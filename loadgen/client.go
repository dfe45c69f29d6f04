package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// client sends one worker's grabs, one at a time. Two kinds exist: rawConn,
// a minimal HTTP/1.1 client on one keep-alive connection, used for http://
// targets; and stdClient, net/http's Transport, used for https:// or when
// Config.NetHTTP asks for it.
//
// Why two: on this 2-core machine the generator shares the CPU with the
// server it measures. net/http's Transport spends three goroutines and
// several channel hand-offs per request (caller, writeLoop, readLoop); the
// raw client writes the request and reads the reply on the worker's own
// goroutine, with no allocation. Against the baseline handler it reaches
// about what wrk reaches, where net/http reaches 55-75% of it.
type client interface {
	// warmup opens the connection with one GET /healthz.
	warmup(ctx context.Context)
	// grab sends the grab of uid, with the waiting room's pass if not "",
	// and reads the reply's body into buf (the head of it, if longer); n is
	// the number of body bytes kept.
	grab(uid int64, pass string, buf []byte) (status, n int, err error)
	// send sends a body-less request for uid to path (under the base URL)
	// with the headers hdr ("Name: value" each), and reads the reply's body
	// like grab: the waiting room's join and polls.
	send(method, path string, uid int64, hdr []string, buf []byte) (status, n int, err error)
	// abort makes a request in flight fail at once, and all later ones.
	abort()
	close()
}

// rawConn is the raw HTTP/1.1 client. It speaks just enough of the protocol
// for this API: a body-less POST, replies framed by Content-Length, chunked
// encoding or the end of the connection, and Connection: close.
type rawConn struct {
	addr    string
	host    string
	timeout time.Duration
	healthz string

	mu      sync.Mutex // guards c against abort
	c       net.Conn
	aborted atomic.Bool
	br      *bufio.Reader
	req     []byte // the request up to the user id's value, or the token's
	reqLen  int
	prefix  string                          // the base URL's path
	other   []byte                          // send's request
	token   func(uid int64) (string, error) // nil: X-User-ID
	scratch [512]byte
}

func newRawConn(base *url.URL, activityID int64, timeout time.Duration, token func(int64) (string, error)) *rawConn {
	host := base.Host
	addr := host
	if base.Port() == "" {
		addr = net.JoinHostPort(base.Hostname(), "80")
	}
	rc := &rawConn{addr: addr, host: host, timeout: timeout, healthz: base.Path + "/healthz", token: token, prefix: base.Path}
	identity := "X-User-ID: "
	if token != nil {
		identity = "Authorization: Bearer "
	}
	rc.req = fmt.Appendf(nil, "POST %s/api/v1/activities/%d/grab HTTP/1.1\r\nHost: %s\r\n"+
		"User-Agent: seckill-loadgen\r\nContent-Length: 0\r\n%s", base.Path, activityID, host, identity)
	rc.reqLen = len(rc.req)
	rc.req = append(rc.req, make([]byte, 0, 24)...)
	return rc
}

func (rc *rawConn) connect() error {
	if rc.aborted.Load() {
		return errAborted
	}
	c, err := net.DialTimeout("tcp", rc.addr, rc.timeout)
	if err != nil {
		return err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	rc.mu.Lock()
	rc.c = c
	rc.mu.Unlock()
	if rc.aborted.Load() { // abort ran between the check above and the store
		rc.drop()
		return errAborted
	}
	if rc.br == nil {
		rc.br = bufio.NewReaderSize(c, 8192)
	} else {
		rc.br.Reset(c)
	}
	return nil
}

var errAborted = errors.New("loadgen: run cancelled")

func (rc *rawConn) drop() {
	rc.mu.Lock()
	if rc.c != nil {
		_ = rc.c.Close()
		rc.c = nil
	}
	rc.mu.Unlock()
}

func (rc *rawConn) abort() {
	rc.aborted.Store(true)
	rc.mu.Lock()
	if rc.c != nil {
		_ = rc.c.SetDeadline(time.Unix(1, 0))
	}
	rc.mu.Unlock()
}

func (rc *rawConn) close() { rc.drop() }

func (rc *rawConn) warmup(context.Context) {
	req := fmt.Appendf(nil, "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: seckill-loadgen\r\n\r\n", rc.healthz, rc.host)
	var buf [512]byte
	_, _, _ = rc.roundTrip(req, buf[:])
}

func (rc *rawConn) grab(uid int64, pass string, buf []byte) (int, int, error) {
	req, err := rc.identify(rc.req[:rc.reqLen], uid)
	if err != nil {
		return 0, 0, err
	}
	if pass != "" {
		req = append(append(req, "\r\nX-Queue-Pass: "...), pass...)
	}
	rc.req = append(req, "\r\n\r\n"...)
	return rc.roundTrip(rc.req, buf)
}

// identify appends uid's identity header's value to req.
func (rc *rawConn) identify(req []byte, uid int64) ([]byte, error) {
	if rc.token == nil {
		return strconv.AppendInt(req, uid, 10), nil
	}
	tok, err := rc.token(uid)
	if err != nil {
		return req, err
	}
	return append(req, tok...), nil
}

func (rc *rawConn) send(method, path string, uid int64, hdr []string, buf []byte) (int, int, error) {
	req := append(rc.other[:0], method...)
	req = append(append(append(req, ' '), rc.prefix...), path...)
	req = append(append(append(req, " HTTP/1.1\r\nHost: "...), rc.host...), "\r\nUser-Agent: seckill-loadgen\r\nContent-Length: 0\r\n"...)
	if rc.token == nil {
		req = append(req, "X-User-ID: "...)
	} else {
		req = append(req, "Authorization: Bearer "...)
	}
	req, err := rc.identify(req, uid)
	if err != nil {
		return 0, 0, err
	}
	for _, h := range hdr {
		req = append(append(req, "\r\n"...), h...)
	}
	rc.other = append(req, "\r\n\r\n"...)
	return rc.roundTrip(rc.other, buf)
}

func (rc *rawConn) roundTrip(req, buf []byte) (int, int, error) {
	if rc.aborted.Load() {
		return 0, 0, errAborted
	}
	if rc.c == nil {
		if err := rc.connect(); err != nil {
			return 0, 0, err
		}
	}
	_ = rc.c.SetDeadline(time.Now().Add(rc.timeout))
	if rc.aborted.Load() { // abort's deadline may have been overwritten just now
		rc.drop()
		return 0, 0, errAborted
	}
	if _, err := rc.c.Write(req); err != nil {
		rc.drop()
		return 0, 0, err
	}
	status, n, keep, err := rc.readResponse(buf)
	if err != nil || !keep {
		rc.drop()
	}
	if err != nil && rc.aborted.Load() {
		err = errAborted
	}
	return status, n, err
}

var errProtocol = errors.New("loadgen: malformed HTTP response")

// readResponse reads one response, skipping 1xx ones, and reports whether
// the connection may carry another request.
func (rc *rawConn) readResponse(buf []byte) (status, n int, keep bool, err error) {
	for {
		line, err := rc.br.ReadSlice('\n')
		if err != nil {
			return 0, 0, false, err
		}
		// "HTTP/1.1 202 Accepted\r\n"
		if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
			return 0, 0, false, errProtocol
		}
		status = atoi3(line[9:12])
		if status < 100 {
			return 0, 0, false, errProtocol
		}
		keep = line[7] == '1'
		contentLength, chunked := -1, false
		for {
			h, err := rc.br.ReadSlice('\n')
			if err != nil {
				return status, 0, false, err
			}
			h = bytes.TrimRight(h, "\r\n")
			if len(h) == 0 {
				break
			}
			name, value, ok := bytes.Cut(h, []byte(":"))
			if !ok {
				return status, 0, false, errProtocol
			}
			value = bytes.TrimSpace(value)
			switch {
			case bytes.EqualFold(name, []byte("Content-Length")):
				contentLength = atoi(value)
				if contentLength < 0 {
					return status, 0, false, errProtocol
				}
			case bytes.EqualFold(name, []byte("Transfer-Encoding")):
				chunked = bytes.EqualFold(value, []byte("chunked"))
			case bytes.EqualFold(name, []byte("Connection")):
				if bytes.EqualFold(value, []byte("close")) {
					keep = false
				} else if bytes.EqualFold(value, []byte("keep-alive")) {
					keep = true
				}
			}
		}
		if status < 200 {
			continue // 100 Continue and the like: the real response follows
		}
		switch {
		case status == 204 || status == 304:
			return status, 0, keep, nil
		case chunked:
			n, err = rc.readChunked(buf)
		case contentLength >= 0:
			n, err = rc.readN(buf, contentLength)
		default:
			n, err = rc.readToEOF(buf)
			keep = false
		}
		return status, n, keep, err
	}
}

// readN reads exactly length bytes of body, keeping what fits in buf.
func (rc *rawConn) readN(buf []byte, length int) (int, error) {
	keep := min(length, len(buf))
	if _, err := io.ReadFull(rc.br, buf[:keep]); err != nil {
		return 0, err
	}
	if rest := length - keep; rest > 0 {
		if _, err := rc.br.Discard(rest); err != nil {
			return keep, err
		}
	}
	return keep, nil
}

func (rc *rawConn) readToEOF(buf []byte) (int, error) {
	n := 0
	for {
		dst := buf[n:]
		if len(dst) == 0 {
			dst = rc.scratch[:]
		}
		m, err := rc.br.Read(dst)
		if len(buf) > n {
			n += m
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

func (rc *rawConn) readChunked(buf []byte) (int, error) {
	n := 0
	for {
		line, err := rc.br.ReadSlice('\n')
		if err != nil {
			return n, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if i := bytes.IndexByte(line, ';'); i >= 0 {
			line = line[:i]
		}
		size, err := strconv.ParseInt(string(bytes.TrimSpace(line)), 16, 32)
		if err != nil || size < 0 {
			return n, errProtocol
		}
		if size == 0 {
			// Trailers, then the empty line.
			for {
				t, err := rc.br.ReadSlice('\n')
				if err != nil {
					return n, err
				}
				if len(bytes.TrimRight(t, "\r\n")) == 0 {
					return n, nil
				}
			}
		}
		m, err := rc.readN(buf[n:], int(size))
		n += m
		if err != nil {
			return n, err
		}
		if _, err := rc.br.Discard(2); err != nil { // the chunk's CRLF
			return n, err
		}
	}
}

func atoi3(b []byte) int {
	if b[0] < '1' || b[0] > '9' || b[1] < '0' || b[1] > '9' || b[2] < '0' || b[2] > '9' {
		return -1
	}
	return int(b[0]-'0')*100 + int(b[1]-'0')*10 + int(b[2]-'0')
}

// atoi parses a non-negative decimal, -1 if b is not one.
func atoi(b []byte) int {
	if len(b) == 0 || len(b) > 15 {
		return -1
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return -1
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// stdClient sends through net/http's Transport, shared by all workers.
type stdClient struct {
	tr      *http.Transport
	base    *url.URL
	tmpl    *http.Request
	healthz string
	token   func(uid int64) (string, error) // nil: X-User-ID
	ctx     context.Context
	cancel  context.CancelFunc
	uid     [20]byte
}

func newStdClient(tr *http.Transport, base *url.URL, activityID int64, token func(int64) (string, error)) *stdClient {
	u := *base
	u.Path = fmt.Sprintf("%s/api/v1/activities/%d/grab", base.Path, activityID)
	ctx, cancel := context.WithCancel(context.Background())
	tmpl, _ := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), nil)
	tmpl.Header.Set("User-Agent", "seckill-loadgen")
	return &stdClient{tr: tr, base: base, tmpl: tmpl, healthz: base.String() + "/healthz", token: token, ctx: ctx, cancel: cancel}
}

func (sc *stdClient) warmup(ctx context.Context) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, sc.healthz, nil)
	if err != nil {
		return
	}
	if resp, err := sc.tr.RoundTrip(req); err == nil {
		var buf [512]byte
		_, _ = readBody(resp, buf[:])
	}
}

func (sc *stdClient) grab(uid int64, pass string, buf []byte) (int, int, error) {
	// A request may not be reused before the transport is done with it, and
	// the transport does not say when its writer finishes; a shallow copy
	// with a fresh header costs a few small allocations.
	req := new(http.Request)
	*req = *sc.tmpl
	req.Header = http.Header{"User-Agent": sc.tmpl.Header["User-Agent"]}
	if pass != "" {
		req.Header["X-Queue-Pass"] = []string{pass}
	}
	return sc.roundTrip(req, uid, buf)
}

func (sc *stdClient) send(method, path string, uid int64, hdr []string, buf []byte) (int, int, error) {
	u := *sc.base
	u.Path += path
	req, err := http.NewRequestWithContext(sc.ctx, method, u.String(), nil)
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("User-Agent", "seckill-loadgen")
	for _, h := range hdr {
		k, v, _ := strings.Cut(h, ": ")
		req.Header.Set(k, v)
	}
	return sc.roundTrip(req, uid, buf)
}

// roundTrip sends req as uid and reads the reply's body into buf.
func (sc *stdClient) roundTrip(req *http.Request, uid int64, buf []byte) (int, int, error) {
	if sc.token != nil {
		tok, err := sc.token(uid)
		if err != nil {
			return 0, 0, err
		}
		req.Header["Authorization"] = []string{"Bearer " + tok}
	} else {
		req.Header["X-User-Id"] = []string{string(strconv.AppendInt(sc.uid[:0], uid, 10))}
	}
	resp, err := sc.tr.RoundTrip(req)
	if err != nil {
		if sc.ctx.Err() != nil {
			err = errAborted
		}
		return 0, 0, err
	}
	n, err := readBody(resp, buf)
	return resp.StatusCode, n, err
}

func (sc *stdClient) abort() { sc.cancel() }
func (sc *stdClient) close() { sc.cancel() }

func newTransport(conns int, timeout time.Duration) *http.Transport {
	return &http.Transport{
		DialContext: (&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}).DialContext,
		// The idle pool must hold every worker's connection, or each
		// request beyond the default 2 would dial anew.
		MaxIdleConns:          conns,
		MaxIdleConnsPerHost:   conns,
		MaxConnsPerHost:       conns,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: timeout,
		DisableCompression:    true,
	}
}

// readBody reads the (small) body into buf, discards what does not fit,
// and closes it, so that the connection goes back to the pool.
func readBody(resp *http.Response, buf []byte) (int, error) {
	defer resp.Body.Close()
	n, err := io.ReadFull(resp.Body, buf)
	switch {
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		return n, nil
	case err != nil:
		return n, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	return n, err
}
