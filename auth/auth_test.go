package auth

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
)

var secret = []byte("0123456789abcdef0123456789abcdef")

func sign(t testing.TB, method jwt.SigningMethod, key any, claims jwt.MapClaims, kid string) string {
	t.Helper()
	tok := jwt.NewWithClaims(method, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func claims(sub any, exp time.Duration) jwt.MapClaims {
	return jwt.MapClaims{"sub": sub, "exp": time.Now().Add(exp).Unix()}
}

func with(c jwt.MapClaims, kv ...any) jwt.MapClaims {
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(c, kv[i].(string))
		} else {
			c[kv[i].(string)] = kv[i+1]
		}
	}
	return c
}

// TestHS256: every way a token can be wrong is refused with the right
// error; good tokens name their user.
func TestHS256(t *testing.T) {
	v, err := New(context.Background(), Config{Secret: secret, Audience: "seckill", Issuer: "shop"})
	if err != nil {
		t.Fatal(err)
	}
	good := func() jwt.MapClaims { return with(claims("42", time.Hour), "aud", "seckill", "iss", "shop") }
	other := []byte("another secret, also 32 bytes...")
	none := func() string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodNone, good()).SignedString(jwt.UnsafeAllowNoneSignatureType)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}()
	valid := sign(t, jwt.SigningMethodHS256, secret, good(), "")
	parts := strings.Split(valid, ".")
	tampered := parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"43","exp":9999999999,"aud":"seckill","iss":"shop"}`)) + "." + parts[2]
	cases := []struct {
		name  string
		token string
		uid   int64
		want  error
	}{
		{"valid", valid, 42, nil},
		{"aud as a list", sign(t, jwt.SigningMethodHS256, secret, with(good(), "aud", []string{"x", "seckill"}), ""), 42, nil},
		{"sub as a number (sub is a string)", sign(t, jwt.SigningMethodHS256, secret, with(good(), "sub", 42), ""), 0, ErrInvalid},
		{"expired", sign(t, jwt.SigningMethodHS256, secret, with(good(), "exp", time.Now().Add(-time.Minute).Unix()), ""), 0, ErrExpired},
		{"expired within the leeway", sign(t, jwt.SigningMethodHS256, secret, with(good(), "exp", time.Now().Add(-5*time.Second).Unix()), ""), 42, nil},
		{"not valid yet", sign(t, jwt.SigningMethodHS256, secret, with(good(), "nbf", time.Now().Add(time.Minute).Unix()), ""), 0, ErrInvalid},
		{"no exp", sign(t, jwt.SigningMethodHS256, secret, with(good(), "exp", nil), ""), 0, ErrInvalid},
		{"wrong audience", sign(t, jwt.SigningMethodHS256, secret, with(good(), "aud", "other"), ""), 0, ErrInvalid},
		{"no audience", sign(t, jwt.SigningMethodHS256, secret, with(good(), "aud", nil), ""), 0, ErrInvalid},
		{"wrong issuer", sign(t, jwt.SigningMethodHS256, secret, with(good(), "iss", "evil"), ""), 0, ErrInvalid},
		{"forged: another secret", sign(t, jwt.SigningMethodHS256, other, good(), ""), 0, ErrInvalid},
		{"forged: payload changed", tampered, 0, ErrInvalid},
		{"alg none", none, 0, ErrInvalid},
		{"alg none, signature cut", strings.TrimSuffix(none, ".") + ".", 0, ErrInvalid},
		{"HS512", sign(t, jwt.SigningMethodHS512, secret, good(), ""), 0, ErrInvalid},
		{"sub missing", sign(t, jwt.SigningMethodHS256, secret, with(good(), "sub", nil), ""), 0, ErrInvalid},
		{"sub zero", sign(t, jwt.SigningMethodHS256, secret, with(good(), "sub", "0"), ""), 0, ErrInvalid},
		{"sub padded", sign(t, jwt.SigningMethodHS256, secret, with(good(), "sub", "042"), ""), 0, ErrInvalid},
		{"sub negative", sign(t, jwt.SigningMethodHS256, secret, with(good(), "sub", -42), ""), 0, ErrInvalid},
		{"sub fractional", sign(t, jwt.SigningMethodHS256, secret, with(good(), "sub", 4.2), ""), 0, ErrInvalid},
		{"sub beyond int64", sign(t, jwt.SigningMethodHS256, secret, with(good(), "sub", "9223372036854775808"), ""), 0, ErrInvalid},
		{"sub an object", sign(t, jwt.SigningMethodHS256, secret, with(good(), "sub", map[string]any{"id": 1}), ""), 0, ErrInvalid},
		{"garbage", "not.a.token", 0, ErrInvalid},
		{"empty", "", 0, ErrInvalid},
		{"huge", strings.Repeat("a", MaxTokenLen+1), 0, ErrInvalid},
	}
	for _, c := range cases {
		for try := range 2 { // the second answer may come from the cache
			uid, err := v.Verify(c.token)
			if uid != c.uid || !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
				t.Errorf("%s (try %d): got %d, %v; want %d, %v", c.name, try, uid, err, c.uid, c.want)
			}
		}
	}
}

// TestStrictClaims: a NumericDate (exp, nbf, iat) written as a JSON string
// is refused, as is a header naming critical extensions (crit, RFC 7515
// section 4.1.11; none is understood here), whether the user is in sub or
// in another claim, with a secret or a JWK Set's key; the same tokens with
// numbers and without crit verify.
func TestStrictClaims(t *testing.T) {
	k := newKeys(t)
	file := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(file, k.jwks, 0o600); err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Add(time.Hour).Unix()
	iat := time.Now().Add(-time.Minute).Unix()
	for _, claim := range []string{"sub", "uid"} {
		v, err := New(context.Background(), Config{Secret: secret, JWKS: file, UserClaim: claim})
		if err != nil {
			t.Fatal(err)
		}
		good := func() jwt.MapClaims { return jwt.MapClaims{claim: "42", "exp": exp, "nbf": iat, "iat": iat} }
		str := func(n int64) string { return strconv.FormatInt(n, 10) }
		crit := func(method jwt.SigningMethod, key any, kid string, header map[string]any) string {
			tok := jwt.NewWithClaims(method, good())
			if kid != "" {
				tok.Header["kid"] = kid
			}
			for h, x := range header {
				tok.Header[h] = x
			}
			s, err := tok.SignedString(key)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		for _, c := range []struct {
			name  string
			token string
			ok    bool
		}{
			{"numbers", sign(t, jwt.SigningMethodHS256, secret, good(), ""), true},
			{"exp a float", sign(t, jwt.SigningMethodHS256, secret, with(good(), "exp", float64(exp)+0.5), ""), true},
			{"exp a string", sign(t, jwt.SigningMethodHS256, secret, with(good(), "exp", str(exp)), ""), false},
			{"exp an empty string", sign(t, jwt.SigningMethodHS256, secret, with(good(), "exp", ""), ""), false},
			{"exp true", sign(t, jwt.SigningMethodHS256, secret, with(good(), "exp", true), ""), false},
			{"nbf a string", sign(t, jwt.SigningMethodHS256, secret, with(good(), "nbf", str(iat)), ""), false},
			{"iat a string", sign(t, jwt.SigningMethodHS256, secret, with(good(), "iat", str(iat)), ""), false},
			{"RS256, exp a string", sign(t, jwt.SigningMethodRS256, k.rsa, with(good(), "exp", str(exp)), "r1"), false},
			{"crit naming an unknown extension", crit(jwt.SigningMethodHS256, secret, "", map[string]any{"crit": []string{"x-ext"}, "x-ext": 1}), false},
			{"crit empty", crit(jwt.SigningMethodHS256, secret, "", map[string]any{"crit": []string{}}), false},
			{"crit naming exp", crit(jwt.SigningMethodHS256, secret, "", map[string]any{"crit": []string{"exp"}}), false},
			{"ES256, crit", crit(jwt.SigningMethodES256, k.ec, "e1", map[string]any{"crit": []string{"b64"}, "b64": false}), false},
			{"ES256, another header", crit(jwt.SigningMethodES256, k.ec, "e1", map[string]any{"x-ext": 1}), true},
		} {
			for try := range 2 { // the second answer may come from the cache
				uid, err := v.Verify(c.token)
				if c.ok && (uid != 42 || err != nil) {
					t.Errorf("%s, %s (try %d): %d, %v; want user 42", claim, c.name, try, uid, err)
				}
				if !c.ok && (uid != 0 || !errors.Is(err, ErrInvalid)) {
					t.Errorf("%s, %s (try %d): %d, %v; want ErrInvalid", claim, c.name, try, uid, err)
				}
			}
		}
	}
	v, err := New(context.Background(), Config{Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	tok := sign(t, jwt.SigningMethodHS256, secret, with(claims("42", time.Hour), "exp", strconv.FormatInt(exp, 10)), "")
	if _, err := v.Verify(tok); err == nil || !strings.Contains(err.Error(), "malformed") {
		t.Errorf("exp a string: %v, want it malformed", err)
	}
}

// TestNoLeeway: with NoLeeway a token expired two seconds ago is refused
// (the default leeway would take it).
func TestNoLeeway(t *testing.T) {
	tok := sign(t, jwt.SigningMethodHS256, secret, claims("42", -2*time.Second), "")
	for _, c := range []struct {
		leeway time.Duration
		want   error
	}{{0, nil}, {NoLeeway, ErrExpired}} {
		v, err := New(context.Background(), Config{Secret: secret, Leeway: c.leeway})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := v.Verify(tok); !errors.Is(err, c.want) {
			t.Errorf("leeway %v: %v, want %v", c.leeway, err, c.want)
		}
	}
}

// TestCacheHonoursExpiry: a cached token stops working when it expires,
// and one not valid yet is not answered from the cache before its nbf.
func TestCacheHonoursExpiry(t *testing.T) {
	v, err := New(context.Background(), Config{Secret: secret, Leeway: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	v.now = func() time.Time { return now }
	tok := sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "7", "exp": now.Add(10 * time.Second).Unix()}, "")
	if uid, err := v.Verify(tok); uid != 7 || err != nil {
		t.Fatalf("fresh token: %d, %v", uid, err)
	}
	if v.cache.Len() != 1 {
		t.Fatalf("cache holds %d tokens, want 1", v.cache.Len())
	}
	now = now.Add(12 * time.Second)
	if _, err := v.Verify(tok); !errors.Is(err, ErrExpired) {
		t.Errorf("after exp+leeway: %v, want ErrExpired", err)
	}
	// A token trusted for cacheFor is checked again: its key may be gone.
	long := sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "8", "exp": now.Add(time.Hour).Unix()}, "")
	if _, err := v.Verify(long); err != nil {
		t.Fatal(err)
	}
	v.secret = []byte("the key was rotated: 32 bytes...")
	now = now.Add(cacheFor - time.Second)
	if _, err := v.Verify(long); err != nil {
		t.Errorf("within the cache time: %v", err)
	}
	now = now.Add(2 * time.Second)
	if _, err := v.Verify(long); !errors.Is(err, ErrInvalid) {
		t.Errorf("after the cache time with the key rotated: %v, want ErrInvalid", err)
	}
}

// TestCacheBounded: the cache never holds more than CacheSize tokens.
func TestCacheBounded(t *testing.T) {
	v, err := New(context.Background(), Config{Secret: secret, CacheSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	s := Signer{Secret: secret}
	for uid := int64(1); uid <= 1000; uid++ {
		tok, err := s.Token(uid)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := v.Verify(tok); got != uid || err != nil {
			t.Fatalf("user %d: %d, %v", uid, got, err)
		}
	}
	if n := v.cache.Len(); n != 100 {
		t.Errorf("cache holds %d tokens, want 100", n)
	}
}

// keys is an RSA and an ECDSA key pair published as a JWK Set.
type keys struct {
	rsa  *rsa.PrivateKey
	ec   *ecdsa.PrivateKey
	jwks []byte
}

func newKeys(t *testing.T) keys {
	t.Helper()
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ek, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st := jwkset.NewMemoryStorage()
	for kid, k := range map[string]struct {
		pub crypto.PublicKey
		alg jwkset.ALG
	}{"r1": {rk.Public(), jwkset.AlgRS256}, "e1": {ek.Public(), jwkset.AlgES256}} {
		jwk, err := jwkset.NewJWKFromKey(k.pub, jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{KID: kid, ALG: k.alg, USE: jwkset.UseSig}})
		if err != nil {
			t.Fatal(err)
		}
		if err := st.KeyWrite(ctx, jwk); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := st.JSONPublic(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return keys{rsa: rk, ec: ek, jwks: raw}
}

// TestJWKS: RS256 and ES256 tokens verify against a JWK Set read from a
// file and from a URL; a token signed by another key, with an unknown key
// id, or an HS256 token signed with the public key as its secret (the
// algorithm confusion attack) does not.
func TestJWKS(t *testing.T) {
	k := newKeys(t)
	file := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(file, k.jwks, 0o600); err != nil {
		t.Fatal(err)
	}
	fetches := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches++
		w.Header().Set("Content-Type", "application/json")
		w.Write(k.jwks)
	}))
	defer srv.Close()
	stranger, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pubDER := k.rsa.PublicKey.N.Bytes()
	for _, src := range []string{file, srv.URL + "/jwks.json"} {
		ctx, cancel := context.WithCancel(context.Background())
		v, err := New(ctx, Config{JWKS: src})
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		cases := []struct {
			name  string
			token string
			uid   int64
		}{
			{"RS256", sign(t, jwt.SigningMethodRS256, k.rsa, claims("5", time.Hour), "r1"), 5},
			{"ES256", sign(t, jwt.SigningMethodES256, k.ec, claims("6", time.Hour), "e1"), 6},
			{"RS256 without a kid", sign(t, jwt.SigningMethodRS256, k.rsa, claims("7", time.Hour), ""), 7},
			{"RS256 by a stranger", sign(t, jwt.SigningMethodRS256, stranger, claims("5", time.Hour), "r1"), 0},
			{"RS256 with an unknown kid", sign(t, jwt.SigningMethodRS256, k.rsa, claims("5", time.Hour), "r9"), 0},
			{"RS256 under the EC key's kid", sign(t, jwt.SigningMethodRS256, k.rsa, claims("5", time.Hour), "e1"), 0},
			{"HS256 with the public key as secret", sign(t, jwt.SigningMethodHS256, pubDER, claims("5", time.Hour), "r1"), 0},
			{"RS512", sign(t, jwt.SigningMethodRS512, k.rsa, claims("5", time.Hour), "r1"), 0},
		}
		for _, c := range cases {
			uid, err := v.Verify(c.token)
			if uid != c.uid || (c.uid == 0) != errors.Is(err, ErrInvalid) {
				t.Errorf("%s, %s: got %d, %v; want %d", src, c.name, uid, err, c.uid)
			}
		}
		cancel()
	}
	if fetches != 1 {
		t.Errorf("the JWK Set URL was fetched %d times, want 1 (an unknown kid must not fetch it)", fetches)
	}
	if _, err := New(context.Background(), Config{JWKS: srv.URL + "/x", JWKSRefresh: time.Hour}); err != nil {
		t.Fatal(err)
	}
	srv.Close()
	if _, err := New(context.Background(), Config{JWKS: srv.URL + "/jwks.json"}); err == nil {
		t.Error("an unreachable JWK Set URL was accepted")
	}
	if _, err := New(context.Background(), Config{JWKS: filepath.Join(t.TempDir(), "missing.json")}); err == nil {
		t.Error("a missing JWK Set file was accepted")
	}
}

// TestConfig: a short secret or no key at all is a configuration error.
func TestConfig(t *testing.T) {
	for _, cfg := range []Config{{}, {Secret: []byte("short")}} {
		if _, err := New(context.Background(), cfg); err == nil {
			t.Errorf("%+v: accepted", cfg)
		}
	}
}

// TestSigner: minted tokens verify, with a custom user claim, audience
// and issuer.
func TestSigner(t *testing.T) {
	v, err := New(context.Background(), Config{Secret: secret, UserClaim: "uid", Audience: "a", Issuer: "i"})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := Signer{Secret: secret, UserClaim: "uid", Audience: "a", Issuer: "i"}.Token(9223372036854775807)
	if err != nil {
		t.Fatal(err)
	}
	if uid, err := v.Verify(tok); uid != 9223372036854775807 || err != nil {
		t.Errorf("got %d, %v", uid, err)
	}
	// Another claim may hold a number, exactly (json.Number, not float64).
	tok = sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"uid": 9007199254740993, "aud": "a", "iss": "i", "exp": time.Now().Add(time.Hour).Unix()}, "")
	if uid, err := v.Verify(tok); uid != 9007199254740993 || err != nil {
		t.Errorf("numeric uid claim: got %d, %v", uid, err)
	}
	tok, _ = Signer{Secret: secret, Audience: "a", Issuer: "i"}.Token(5) // user in sub, not uid
	if _, err := v.Verify(tok); !errors.Is(err, ErrInvalid) {
		t.Errorf("token without the uid claim: %v", err)
	}
}

func BenchmarkVerify(b *testing.B) {
	v, err := New(context.Background(), Config{Secret: secret, CacheSize: 1000})
	if err != nil {
		b.Fatal(err)
	}
	s := Signer{Secret: secret}
	toks := make([]string, 4096) // cycled through: each misses the cache
	for i := range toks {
		toks[i], _ = s.Token(int64(i + 1))
	}
	b.Run("cached", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if _, err := v.Verify(toks[i%100]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("uncached", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if _, err := v.Verify(toks[i%len(toks)]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("mint", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if _, err := s.Token(int64(i + 1)); err != nil {
				b.Fatal(err)
			}
		}
	})
}
