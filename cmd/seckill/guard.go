package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"

	"github.com/seckilldev/seckill/auth"
	"github.com/seckilldev/seckill/httpapi"
	"github.com/seckilldev/seckill/limit"
)

// guardFlags are serve's defences against hostile clients: how buyers are
// identified, rate limits, and the bounds of the HTTP server. Zero values
// (a serveConfig built in code, as demo and the tests do) take the
// defaults the flags show.
type guardFlags struct {
	identity    string // header or jwt
	jwtSecret   string
	jwtJWKS     string
	jwtAudience string
	jwtIssuer   string
	jwtClaim    string
	jwtLeeway   time.Duration

	userRate  float64
	userBurst int
	ipRate    float64
	ipBurst   int
	rateStore string // local or redis
	proxies   string

	readHeaderTimeout time.Duration
	readTimeout       time.Duration
	writeTimeout      time.Duration
	idleTimeout       time.Duration
	maxHeaderBytes    int
	maxBody           int64
	maxInFlight       int
	maxConns          int
	missDelay         time.Duration
}

const (
	defaultReadHeaderTimeout = 5 * time.Second
	defaultReadTimeout       = 10 * time.Second
	defaultWriteTimeout      = 10 * time.Second
	defaultIdleTimeout       = 2 * time.Minute
	defaultMaxHeaderBytes    = 16 << 10
	defaultJWTLeeway         = 10 * time.Second
	// About 13 KB each (8,000 connections sending headers slowly took
	// serve's resident memory from 23 to 126 MB): 10,000 bound them near
	// 130 MB.
	defaultMaxConns = 10000
)

func (g *guardFlags) register(fs flagSet) {
	fs.StringVar(&g.identity, "identity", "header", "how buyers are identified: header (X-User-ID, set by a trusted gateway, which must replace any the client sent) or jwt (a bearer JWT verified here: --jwt-secret or --jwt-jwks)")
	fs.StringVar(&g.jwtSecret, "jwt-secret", "", "with --identity jwt: the HS256 secret, at least 32 bytes (prefer the environment twin to the command line)")
	fs.StringVar(&g.jwtJWKS, "jwt-jwks", "", "with --identity jwt: a JWK Set of RS256/ES256 public keys, a file path or an http(s) URL (read at start, then every 5 minutes)")
	fs.StringVar(&g.jwtAudience, "jwt-audience", "", "with --identity jwt: the aud a token must carry (default: not checked)")
	fs.StringVar(&g.jwtIssuer, "jwt-issuer", "", "with --identity jwt: the iss a token must carry (default: not checked)")
	fs.StringVar(&g.jwtClaim, "jwt-user-claim", "sub", "with --identity jwt: the claim that holds the user id (a positive 64-bit integer)")
	fs.DurationVar(&g.jwtLeeway, "jwt-leeway", defaultJWTLeeway, "with --identity jwt: the clock skew allowed on exp and nbf (0: none)")
	fs.Float64Var(&g.userRate, "user-rate", 0, "requests per second each user may send, sustained (0: no limit); over it: 429 rate_limited with Retry-After")
	fs.IntVar(&g.userBurst, "user-burst", 0, "requests a user may send at once (default: --user-rate rounded up)")
	fs.Float64Var(&g.ipRate, "ip-rate", 0, "requests per second each client address may send, sustained (0: no limit; IPv6 by /64)")
	fs.IntVar(&g.ipBurst, "ip-burst", 0, "requests a client address may send at once (default: --ip-rate rounded up)")
	fs.StringVar(&g.rateStore, "rate-limit-store", "local", "where the rate limits are kept: local (per instance, in memory) or redis (across instances: one Redis round trip per request)")
	fs.StringVar(&g.proxies, "trusted-proxies", "", "comma-separated addresses or CIDRs of proxies whose X-Forwarded-For is believed for the client address (default: none; the peer is the client)")
	fs.DurationVar(&g.readHeaderTimeout, "read-header-timeout", defaultReadHeaderTimeout, "time a client has to send a request's line and headers, from its first byte (on a new connection: from its opening); a slower one gets 408 and is closed")
	fs.DurationVar(&g.readTimeout, "read-timeout", defaultReadTimeout, "time a client has to send a request's body, from the end of its headers (a body is read whole before any handler runs); a slower one gets 408 and is closed")
	fs.DurationVar(&g.writeTimeout, "write-timeout", defaultWriteTimeout, "time the writing of an answer may take (a client that does not read is cut off); a streamed answer (the dashboard's events) extends it as it goes")
	fs.DurationVar(&g.idleTimeout, "idle-timeout", defaultIdleTimeout, "time an idle keep-alive connection is kept open")
	fs.IntVar(&g.maxHeaderBytes, "max-header-bytes", defaultMaxHeaderBytes, "bound on a request's line and headers, in bytes (beyond: 431); each connection reads into a buffer of this size")
	fs.Int64Var(&g.maxBody, "max-body", httpapi.DefaultMaxBody, "bound on a request body, in bytes (beyond: 413)")
	fs.IntVar(&g.maxInFlight, "max-in-flight", httpapi.DefaultMaxInFlight, "requests handled at once; beyond: 503 overloaded, at once")
	fs.IntVar(&g.maxConns, "max-conns", defaultMaxConns, "connections open at once; a connection beyond is answered 503 overloaded and closed")
	fs.DurationVar(&g.missDelay, "miss-delay", httpapi.DefaultMissDelay, "how long the order routes wait before they answer 404: a client guessing order ids gets one answer per delay on each connection (0: at once)")
}

// check validates the flags and fills in the defaults of zero values.
func (g *guardFlags) check() error {
	for _, d := range []struct {
		flag string
		v    *time.Duration
		def  time.Duration
	}{
		{"--read-header-timeout", &g.readHeaderTimeout, defaultReadHeaderTimeout},
		{"--read-timeout", &g.readTimeout, defaultReadTimeout},
		{"--write-timeout", &g.writeTimeout, defaultWriteTimeout},
		{"--idle-timeout", &g.idleTimeout, defaultIdleTimeout},
	} {
		switch {
		case *d.v < 0:
			return usagef("%s: %v is negative", d.flag, *d.v)
		case *d.v == 0:
			*d.v = d.def
		}
	}
	if g.jwtLeeway < 0 { // 0 is a leeway of none, not the default
		return usagef("--jwt-leeway: %v is negative", g.jwtLeeway)
	}
	if g.missDelay < 0 { // 0: at once, as in a serveConfig built in code
		return usagef("--miss-delay: %v is negative", g.missDelay)
	}
	if g.identity == "" {
		g.identity = "header"
	}
	if g.rateStore == "" {
		g.rateStore = "local"
	}
	if g.jwtClaim == "" {
		g.jwtClaim = "sub"
	}
	if g.maxHeaderBytes == 0 {
		g.maxHeaderBytes = defaultMaxHeaderBytes
	}
	if g.maxBody == 0 {
		g.maxBody = httpapi.DefaultMaxBody
	}
	if g.maxConns == 0 {
		g.maxConns = defaultMaxConns
	}
	if g.maxInFlight == 0 {
		g.maxInFlight = httpapi.DefaultMaxInFlight
	}
	jwtSet := g.jwtSecret != "" || g.jwtJWKS != "" || g.jwtAudience != "" || g.jwtIssuer != ""
	switch {
	case g.identity != "header" && g.identity != "jwt":
		return usagef("--identity: %q is not one of header, jwt", g.identity)
	case g.identity == "header" && jwtSet:
		return usagef("--jwt-secret, --jwt-jwks, --jwt-audience and --jwt-issuer need --identity jwt")
	case g.identity == "jwt" && g.jwtSecret == "" && g.jwtJWKS == "":
		return usagef("--identity jwt needs --jwt-secret (or %s) or --jwt-jwks", envName("jwt-secret"))
	case g.jwtSecret != "" && len(g.jwtSecret) < auth.MinSecretLen:
		return usagef("the secret of --jwt-secret or %s is %d bytes, too short for HS256: want at least %d",
			envName("jwt-secret"), len(g.jwtSecret), auth.MinSecretLen)
	case g.userRate < 0 || g.userRate > 1e6:
		return usagef("--user-rate: %v is not between 0 and 1000000", g.userRate)
	case g.ipRate < 0 || g.ipRate > 1e6:
		return usagef("--ip-rate: %v is not between 0 and 1000000", g.ipRate)
	case g.userBurst < 0 || g.userBurst > 1e6:
		return usagef("--user-burst: %d is not between 0 and 1000000", g.userBurst)
	case g.ipBurst < 0 || g.ipBurst > 1e6:
		return usagef("--ip-burst: %d is not between 0 and 1000000", g.ipBurst)
	case g.rateStore != "local" && g.rateStore != "redis":
		return usagef("--rate-limit-store: %q is not one of local, redis", g.rateStore)
	case g.maxHeaderBytes < 1024:
		return usagef("--max-header-bytes: %d is below 1024", g.maxHeaderBytes)
	case g.maxBody < 1024:
		return usagef("--max-body: %d is below 1024", g.maxBody)
	case g.maxInFlight < 1:
		return usagef("--max-in-flight: %d is below 1", g.maxInFlight)
	case g.maxConns < 1:
		return usagef("--max-conns: %d is below 1", g.maxConns)
	}
	if _, err := g.trustedProxies(); err != nil {
		return err
	}
	return nil
}

func (g *guardFlags) trustedProxies() ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range strings.Split(g.proxies, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return nil, usagef("--trusted-proxies: %q is neither an address nor a CIDR", s)
			}
			p = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// The bounds on --admin-token. The token is compared in constant time, and
// guesses cost one request each (--ip-rate slows them): 16 bytes of
// printable text are still far beyond a guess; 32, the length of the token
// serve generates and of the shortest JWT secret, is what is recommended.
const (
	minAdminToken  = 16
	goodAdminToken = 32
)

// checkAdminToken refuses an admin token shorter than minAdminToken, and
// warns of one shorter than goodAdminToken ("": none given, serve generates
// one).
func checkAdminToken(token string, log *slog.Logger) error {
	switch n := len(token); {
	case n == 0:
	case n < minAdminToken:
		return usagef("the token of --admin-token or %s is %d bytes, too short: want at least %d, better %d (head -c 24 /dev/urandom | base64), or none for a generated one",
			envName("admin-token"), n, minAdminToken, goodAdminToken)
	case n < goodAdminToken:
		log.Warn("the admin token is shorter than recommended", "bytes", n, "want", goodAdminToken)
	}
	return nil
}

// secrets returns what must never be logged: the JWT secret, the
// credentials of a JWK Set URL (https://user:pw@..., ?token=...) and the
// admin token (a generated one is printed once, on stdout, by design). A
// token shorter than 8 bytes is not hidden: hiding "tok" would garble every
// "token" and "stock" of the log, and such a token guards nothing anyway.
func (g *guardFlags) secrets(adminToken string) []string {
	if len(adminToken) < 8 {
		adminToken = ""
	}
	return append([]string{g.jwtSecret, adminToken}, urlSecrets(g.jwtJWKS)...)
}

// verifier returns the API's bearer-token option with --identity jwt (the
// JWK Set read, from its file or URL), nil without. ctx bounds the JWK
// Set's refreshes.
func (g *guardFlags) verifier(ctx context.Context, log *slog.Logger) (httpapi.Option, error) {
	if g.identity != "jwt" {
		return nil, nil
	}
	cfg := auth.Config{JWKS: g.jwtJWKS, UserClaim: g.jwtClaim, Audience: g.jwtAudience, Issuer: g.jwtIssuer,
		Leeway: g.jwtLeeway, Log: log}
	if g.jwtLeeway == 0 {
		cfg.Leeway = auth.NoLeeway
	}
	if g.jwtSecret != "" {
		cfg.Secret = []byte(g.jwtSecret)
	}
	v, err := auth.New(ctx, cfg)
	if err != nil {
		// The error quotes the URL, credentials included.
		return nil, (secrets{}).add(urlSecrets(g.jwtJWKS)...).err(fmt.Errorf("--jwt-jwks: %w", err))
	}
	return httpapi.WithVerifier(v), nil
}

// apiOptions builds the API's identity (verifier, nil: X-User-ID), limits
// and blocklist. The blocklist needs Run for its changes to reach this
// instance; ctx bounds its first load.
func (g *guardFlags) apiOptions(ctx context.Context, bk *backends, prefix string, log *slog.Logger, verifier httpapi.Option) ([]httpapi.Option, *limit.Blocklist) {
	proxies, _ := g.trustedProxies() // checked by check
	opts := []httpapi.Option{
		httpapi.WithLimits(httpapi.Limits{MaxBody: g.maxBody, MaxInFlight: int64(g.maxInFlight)}),
		httpapi.WithMissDelay(g.missDelay),
		httpapi.WithTrustedProxies(proxies),
	}
	if verifier != nil {
		opts = append(opts, verifier)
	}
	users := limit.Rate{PerSecond: g.userRate, Burst: g.userBurst}
	addrs := limit.Rate{PerSecond: g.ipRate, Burst: g.ipBurst}
	if g.rateStore == "redis" {
		if users.Enabled() {
			opts = append(opts, httpapi.WithUserLimit(limit.NewRedis(bk.rdb, users,
				func(uid int64) string { return prefix + ":rl:u:" + strconv.FormatInt(uid, 10) }, log)))
		}
		if addrs.Enabled() {
			opts = append(opts, httpapi.WithAddrLimit(limit.NewRedis(bk.rdb, addrs,
				func(a netip.Addr) string { return prefix + ":rl:ip:" + a.String() }, log)))
		}
	} else {
		if users.Enabled() {
			opts = append(opts, httpapi.WithUserLimit(limit.NewLocal[int64](users, 0)))
		}
		if addrs.Enabled() {
			opts = append(opts, httpapi.WithAddrLimit(limit.NewLocal[netip.Addr](addrs, 0)))
		}
	}
	bl := limit.NewBlocklist(bk.rdb, prefix, log)
	if err := bl.Load(ctx); err != nil {
		log.Warn("blocklist not read yet; it will be at the next poll", "err", err)
	}
	opts = append(opts, httpapi.WithBlocklist(bl))
	return opts, bl
}

// server returns the HTTP server with the timeouts and bounds of g.
// server is serve's HTTP server: fasthttp, on which the API answers grabs
// itself (front, httpapi.Server.ServeFast) and every other request goes to
// h through fasthttpadaptor. The bounds: --read-header-timeout from a
// request's first byte to the end of its headers, then --read-timeout for
// its body; a body is read whole before a handler runs, within --max-body;
// the line and headers within --max-header-bytes.
func (g *guardFlags) server(front func(*fasthttp.RequestCtx) bool, h http.Handler, d *drainer, log *slog.Logger) *fasthttp.Server {
	slow := fasthttpadaptor.NewFastHTTPHandler(h)
	return &fasthttp.Server{
		Handler: d.handler(func(ctx *fasthttp.RequestCtx) {
			switch {
			case !knownVersion(&ctx.Request.Header):
				ctx.SetConnectionClose()
				httpapi.FastError(ctx, httpapi.VersionNotSupported())
			case !front(ctx):
				slow(ctx)
			}
		}),
		HeaderReceived: func(*fasthttp.RequestHeader) fasthttp.RequestConfig {
			return fasthttp.RequestConfig{ReadTimeout: g.readTimeout}
		},
		ExpectHandler:         expectBody(g.maxBody),
		ErrorHandler:          frontError(g.maxBody, g.maxHeaderBytes),
		ConnState:             d.connState,
		ReadTimeout:           g.readHeaderTimeout,
		WriteTimeout:          g.writeTimeout,
		IdleTimeout:           g.idleTimeout,
		ReadBufferSize:        g.maxHeaderBytes,
		MaxRequestBodySize:    int(g.maxBody),
		NoDefaultServerHeader: true,
		CloseOnShutdown:       true,
		Logger:                fastLogger{log},
	}
}

// frontError answers what the server refuses before any handler: a body
// beyond --max-body (413, as the API answers it), a line or headers beyond
// --max-header-bytes (431), a request not sent in time (408), one that is
// not HTTP (400). The connection closes after, lingering when the client
// may still be sending (see lingerConn).
func frontError(maxBody int64, maxHeader int) func(ctx *fasthttp.RequestCtx, err error) {
	return func(ctx *fasthttp.RequestCtx, err error) {
		var small *fasthttp.ErrSmallBuffer
		var netErr net.Error
		switch {
		case errors.Is(err, fasthttp.ErrBodyTooLarge):
			lingerOnClose(ctx.Conn())
			httpapi.FastError(ctx, httpapi.TooLarge(maxBody))
		case errors.As(err, &small):
			lingerOnClose(ctx.Conn())
			httpapi.FastError(ctx, httpapi.HeadersTooLarge(maxHeader))
		case errors.As(err, &netErr) && netErr.Timeout():
			httpapi.FastError(ctx, httpapi.RequestTimeout())
		default:
			httpapi.FastError(ctx, httpapi.Malformed())
		}
	}
}

// knownVersion reports whether a request is HTTP/1.1 or HTTP/1.0: fasthttp
// parses any HTTP/x.y and answers it as 1.1.
func knownVersion(h *fasthttp.RequestHeader) bool {
	return h.IsHTTP11() || string(h.Protocol()) == "HTTP/1.0"
}

// expectBody answers a request sent with Expect: 100-continue before its
// body: 413 at once, as the API answers it, when its Content-Length is
// beyond --max-body (fasthttp would send 100 Continue, read the start of
// the body, then answer 413); else 100 Continue. A refused connection
// lingers, since a client may send its body without waiting.
func expectBody(maxBody int64) func(ctx *fasthttp.RequestCtx) int {
	return func(ctx *fasthttp.RequestCtx) int {
		if int64(ctx.Request.Header.ContentLength()) <= maxBody {
			return fasthttp.StatusContinue
		}
		lingerOnClose(ctx.Conn())
		// The answer's body and headers are written as set here:
		// TestHostileExpect holds fasthttp to it.
		return httpapi.FastError(ctx, httpapi.TooLarge(maxBody))
	}
}

// fastLogger passes fasthttp's own messages (connection errors) to the
// log at debug level: they are the clients' doing.
type fastLogger struct{ log *slog.Logger }

func (l fastLogger) Printf(format string, args ...any) {
	l.log.Debug("http server", "msg", fmt.Sprintf(format, args...))
}

// buyers is how demo and bench name the users of their crowds: by
// X-User-ID (signer nil), or by bearer tokens they mint with the secret
// the service verifies.
type buyers struct{ signer *auth.Signer }

// jwtBuyers mints tokens with secret, for a service started with
// --identity jwt and the same secret (and audience, issuer and claim).
func jwtBuyers(secret, audience, issuer, claim string) buyers {
	return buyers{&auth.Signer{Secret: []byte(secret), Audience: audience, Issuer: issuer, UserClaim: claim}}
}

// token is loadgen.Config.Token: nil in header mode.
func (b buyers) token() func(uid int64) (string, error) {
	if b.signer == nil {
		return nil
	}
	return b.signer.Token
}

// identify sets a request's identity (loadgen.SettleConfig.Identify): nil
// in header mode, which is loadgen's default.
func (b buyers) identify() func(r *http.Request, uid int64) {
	if b.signer == nil {
		return nil
	}
	return func(r *http.Request, uid int64) {
		tok, err := b.signer.Token(uid)
		if err == nil {
			r.Header.Set("Authorization", "Bearer "+tok)
		}
	}
}
