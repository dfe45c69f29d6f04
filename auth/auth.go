// Package auth verifies the bearer tokens (JWTs) that say who a buyer is,
// and mints them for the load generator and the tests.
//
// A Verifier accepts HS256 tokens signed with a shared secret, and RS256 or
// ES256 tokens signed by a key of a JWK Set (a file, or a URL that is read
// at start and then every refresh interval). A token must carry exp; exp
// and nbf are honoured with a small leeway, aud and iss are checked when
// configured, and the user id is the "sub" claim (or another one) as a
// positive 64-bit integer. Parsing and signature checks are golang-jwt's;
// the JWK Set is MicahParks' keyfunc and jwkset.
//
// Verified tokens are cached (bounded, keyed by the token's SHA-256) until
// they expire or for a minute at most, so that a buyer's repeated clicks
// cost a hash and a map lookup instead of a signature check:
//
//	v, err := auth.New(ctx, auth.Config{Secret: secret})
//	uid, err := v.Verify(token) // ErrExpired, ErrInvalid
package auth

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	lru "github.com/hashicorp/golang-lru/v2"
)

// Errors of Verify. Each comes wrapped with the reason.
var (
	// ErrExpired: the token's exp lies in the past (beyond the leeway).
	ErrExpired = errors.New("the bearer token has expired")
	// ErrInvalid: anything else: malformed, forged, signed with an
	// algorithm or key not accepted, not valid yet, wrong audience or
	// issuer, no usable user id.
	ErrInvalid = errors.New("the bearer token is invalid")
)

// MinSecretLen is the shortest HS256 secret accepted: as long as the hash
// (RFC 7518, section 3.2).
const MinSecretLen = 32

// MaxTokenLen bounds the tokens looked at; longer ones are refused before
// any parsing.
const MaxTokenLen = 8 << 10

// NoLeeway, as Config.Leeway, allows no clock skew at all on exp and nbf.
const NoLeeway time.Duration = -1

// Config configures a Verifier. At least one of Secret and JWKS is set.
type Config struct {
	// Secret verifies HS256 tokens; at least MinSecretLen bytes.
	Secret []byte
	// JWKS is a JWK Set of public keys for RS256 and ES256 tokens: a file
	// path, or an http(s):// URL.
	JWKS string
	// JWKSRefresh is how often a JWKS URL is read again. Default 5 minutes.
	// A token whose key id is unknown is refused without reading the URL
	// (a stream of made-up key ids must not become requests to the
	// identity provider): publish a new key before signing with it.
	JWKSRefresh time.Duration
	// UserClaim names the claim that holds the user id. Default "sub".
	UserClaim string
	// Audience, if set, must be one of the token's aud values.
	Audience string
	// Issuer, if set, must be the token's iss.
	Issuer string
	// Leeway is the clock skew allowed on exp and nbf. Default (0) 10s;
	// NoLeeway allows none.
	Leeway time.Duration
	// CacheSize bounds the verified tokens remembered. Default 65536
	// (about 8 MB).
	CacheSize int
	// Log receives JWKS refresh failures. Default: discarded.
	Log *slog.Logger
}

// Verifier verifies bearer tokens. It is safe for concurrent use.
type Verifier struct {
	secret  []byte
	jwks    keyfunc.Keyfunc
	claim   string
	parser  *jwt.Parser
	cache   *lru.Cache[[sha256.Size]byte, verified]
	now     func() time.Time
	leeway  time.Duration
	methods []string
}

// verified is a cached verdict: the user, and until when it holds.
type verified struct {
	uid       int64
	notBefore time.Time
	until     time.Time
}

// cacheFor bounds how long a verified token is trusted without checking
// its signature again (a key removed from the JWK Set stops working
// within it).
const cacheFor = time.Minute

// New returns a Verifier. With a JWKS URL, the set is read before New
// returns (an error if it cannot be) and again every JWKSRefresh until ctx
// ends.
func New(ctx context.Context, cfg Config) (*Verifier, error) {
	if cfg.Secret == nil && cfg.JWKS == "" {
		return nil, errors.New("auth: neither a secret nor a JWK Set is configured")
	}
	if cfg.Secret != nil && len(cfg.Secret) < MinSecretLen {
		return nil, fmt.Errorf("auth: the HS256 secret has %d bytes, want at least %d", len(cfg.Secret), MinSecretLen)
	}
	if cfg.UserClaim == "" {
		cfg.UserClaim = "sub"
	}
	switch {
	case cfg.Leeway == 0:
		cfg.Leeway = 10 * time.Second
	case cfg.Leeway < 0:
		cfg.Leeway = 0
	}
	if cfg.CacheSize <= 0 {
		cfg.CacheSize = 65536
	}
	if cfg.JWKSRefresh <= 0 {
		cfg.JWKSRefresh = 5 * time.Minute
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	v := &Verifier{secret: cfg.Secret, claim: cfg.UserClaim, leeway: cfg.Leeway, now: time.Now}
	if cfg.Secret != nil {
		v.methods = append(v.methods, jwt.SigningMethodHS256.Alg())
	}
	if cfg.JWKS != "" {
		kf, err := jwks(ctx, cfg)
		if err != nil {
			return nil, err
		}
		v.jwks = kf
		v.methods = append(v.methods, jwt.SigningMethodRS256.Alg(), jwt.SigningMethodES256.Alg())
	}
	opts := []jwt.ParserOption{jwt.WithValidMethods(v.methods), jwt.WithLeeway(cfg.Leeway),
		jwt.WithExpirationRequired(), jwt.WithJSONNumber(), jwt.WithTimeFunc(func() time.Time { return v.now() })}
	if cfg.Audience != "" {
		opts = append(opts, jwt.WithAudience(cfg.Audience))
	}
	if cfg.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(cfg.Issuer))
	}
	v.parser = jwt.NewParser(opts...)
	var err error
	if v.cache, err = lru.New[[sha256.Size]byte, verified](cfg.CacheSize); err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	return v, nil
}

// jwks loads the JWK Set from a file or a URL.
func jwks(ctx context.Context, cfg Config) (keyfunc.Keyfunc, error) {
	if !strings.HasPrefix(cfg.JWKS, "http://") && !strings.HasPrefix(cfg.JWKS, "https://") {
		raw, err := os.ReadFile(cfg.JWKS)
		if err != nil {
			return nil, fmt.Errorf("auth: read the JWK Set: %w", err)
		}
		kf, err := keyfunc.NewJWKSetJSON(json.RawMessage(raw))
		if err != nil {
			return nil, fmt.Errorf("auth: JWK Set %s: %w", cfg.JWKS, err)
		}
		return kf, nil
	}
	// The storage is built here rather than with keyfunc.NewDefault, whose
	// refresh on an unknown key id makes requests wait on a rate limiter
	// (up to a minute) and lets made-up key ids trigger fetches.
	log := cfg.Log
	st, err := jwkset.NewStorageFromHTTP(cfg.JWKS, jwkset.HTTPClientStorageOptions{
		Ctx:             ctx,
		Client:          &http.Client{Timeout: 10 * time.Second},
		HTTPTimeout:     10 * time.Second,
		RefreshInterval: cfg.JWKSRefresh,
		RefreshErrorHandler: func(ctx context.Context, err error) {
			log.WarnContext(ctx, "JWK Set refresh failed; the keys read before stay in use", "url", cfg.JWKS, "err", err)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("auth: JWK Set %s: %w", cfg.JWKS, err)
	}
	kf, err := keyfunc.New(keyfunc.Options{Ctx: ctx, Storage: st})
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	return kf, nil
}

// Verify returns the user id a token names. Errors wrap ErrExpired or
// ErrInvalid.
func (v *Verifier) Verify(token string) (int64, error) {
	if token == "" || len(token) > MaxTokenLen {
		return 0, fmt.Errorf("%w: it is empty or longer than %d bytes", ErrInvalid, MaxTokenLen)
	}
	key := sha256.Sum256([]byte(token))
	now := v.now()
	if c, ok := v.cache.Get(key); ok {
		switch {
		case now.After(c.until):
			v.cache.Remove(key) // expired, or trusted long enough: check again
		case now.Before(c.notBefore):
			return 0, fmt.Errorf("%w: it is not valid yet", ErrInvalid)
		default:
			return c.uid, nil
		}
	}
	// The registered claims decode into a struct at half the cost of a
	// map; another user claim needs the map.
	var claims jwt.Claims = &registered{}
	if v.claim != "sub" {
		claims = &jwt.MapClaims{}
	}
	if _, err := v.parser.ParseWithClaims(token, claims, v.key); err != nil {
		if errors.Is(err, jwt.ErrTokenExpired) {
			return 0, ErrExpired
		}
		return 0, fmt.Errorf("%w: %s", ErrInvalid, reason(err))
	}
	// golang-jwt reads a map's iat only when asked to check it: one that
	// is not a NumericDate is refused all the same, as in the struct.
	if _, err := claims.GetIssuedAt(); err != nil {
		return 0, fmt.Errorf("%w: its iat is not a number", ErrInvalid)
	}
	uid, err := v.userID(claims)
	if err != nil {
		return 0, err
	}
	c := verified{uid: uid, until: now.Add(cacheFor)}
	if exp, err := claims.GetExpirationTime(); err == nil && exp != nil && exp.Add(v.leeway).Before(c.until) {
		c.until = exp.Add(v.leeway)
	}
	if nbf, err := claims.GetNotBefore(); err == nil && nbf != nil {
		c.notBefore = nbf.Add(-v.leeway)
	}
	v.cache.Add(key, c)
	return uid, nil
}

// errCritical refuses a token whose header has crit: it names extensions
// the recipient must understand or refuse the token (RFC 7515, section
// 4.1.11), and this verifier understands none. golang-jwt ignores crit.
var errCritical = errors.New("auth: the token's header names critical extensions (crit)")

// key picks the verification key by the token's algorithm, which the
// parser has already checked against the accepted ones: an HS256 token is
// never checked against a public key taken for a shared secret. A header
// with crit is refused first.
func (v *Verifier) key(t *jwt.Token) (any, error) {
	if _, ok := t.Header["crit"]; ok {
		return nil, errCritical
	}
	if t.Method.Alg() == jwt.SigningMethodHS256.Alg() {
		return v.secret, nil
	}
	return v.jwks.Keyfunc(t)
}

// registered are the registered claims, with exp, nbf and iat held to
// RFC 7519's NumericDate, a JSON number (section 2): golang-jwt's
// NumericDate also takes a JSON string that holds one ("exp":"9999999999"),
// which another verifier, in front of or behind this one, may read
// otherwise. The map of another user claim refuses such a string already.
type registered struct {
	jwt.RegisteredClaims
	ExpiresAt *numericDate `json:"exp,omitempty"`
	NotBefore *numericDate `json:"nbf,omitempty"`
	IssuedAt  *numericDate `json:"iat,omitempty"`
}

func (c *registered) GetExpirationTime() (*jwt.NumericDate, error) { return c.ExpiresAt.date(), nil }
func (c *registered) GetNotBefore() (*jwt.NumericDate, error)      { return c.NotBefore.date(), nil }
func (c *registered) GetIssuedAt() (*jwt.NumericDate, error)       { return c.IssuedAt.date(), nil }

// numericDate is a NumericDate that must be a JSON number.
type numericDate struct{ jwt.NumericDate }

func (d *numericDate) UnmarshalJSON(b []byte) error {
	if len(b) == 0 || (b[0] != '-' && (b[0] < '0' || b[0] > '9')) {
		return fmt.Errorf("a NumericDate must be a JSON number, not %.20s", b)
	}
	return d.NumericDate.UnmarshalJSON(b)
}

func (d *numericDate) date() *jwt.NumericDate {
	if d == nil {
		return nil
	}
	return &d.NumericDate
}

// userID reads the user claim: a canonical positive decimal integer, a
// JSON string (sub is one, RFC 7519) or, in another claim, a number.
func (v *Verifier) userID(claims jwt.Claims) (int64, error) {
	var s string
	switch c := claims.(type) {
	case *registered:
		s = c.Subject
	case *jwt.MapClaims:
		switch c := (*c)[v.claim].(type) {
		case string:
			s = c
		case json.Number:
			s = c.String()
		}
	}
	uid, ok := ParseID(s)
	if !ok {
		return 0, fmt.Errorf("%w: claim %q must be a positive 64-bit integer", ErrInvalid, v.claim)
	}
	return uid, nil
}

// ParseID accepts only the canonical decimal form of a positive int64 (no
// sign, no leading zeros), so that one user (or order, or activity) has one
// spelling, in a claim, a header or a path.
func ParseID(s string) (int64, bool) {
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

// reason is the part of a golang-jwt error a client may read: which check
// failed, never key material.
func reason(err error) string {
	for _, r := range []struct {
		err  error
		text string
	}{
		{errCritical, "its header names critical extensions (crit) this service does not understand"},
		{jwt.ErrTokenMalformed, "it is malformed"},
		{jwt.ErrTokenUnverifiable, "its algorithm or key is not accepted"},
		{jwt.ErrTokenSignatureInvalid, "its signature is wrong"},
		{jwt.ErrTokenNotValidYet, "it is not valid yet"},
		{jwt.ErrTokenRequiredClaimMissing, "it lacks a required claim (exp, or a configured aud or iss)"},
		{jwt.ErrTokenInvalidAudience, "its audience is not this service"},
		{jwt.ErrTokenInvalidIssuer, "its issuer is not the configured one"},
		{jwt.ErrTokenUsedBeforeIssued, "it was issued in the future"},
		{jwt.ErrTokenInvalidClaims, "its claims are invalid"},
	} {
		if errors.Is(err, r.err) {
			return r.text
		}
	}
	return "it cannot be verified"
}

// Signer mints HS256 tokens: for `seckill demo` and `bench` in JWT mode,
// `seckill token`, and tests. A real deployment's tokens come from its
// identity provider.
type Signer struct {
	Secret    []byte
	UserClaim string // default "sub"
	Audience  string
	Issuer    string
	TTL       time.Duration // default 1 hour
}

// Token returns a token naming user uid, valid from now for TTL.
func (s Signer) Token(uid int64) (string, error) {
	ttl := s.TTL
	if ttl <= 0 {
		ttl = time.Hour
	}
	now := time.Now()
	claim := s.UserClaim
	if claim == "" {
		claim = "sub"
	}
	claims := jwt.MapClaims{claim: strconv.FormatInt(uid, 10), "iat": now.Unix(), "exp": now.Add(ttl).Unix()}
	if s.Audience != "" {
		claims["aud"] = s.Audience
	}
	if s.Issuer != "" {
		claims["iss"] = s.Issuer
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(s.Secret)
}
