package httpapi

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"net/http"
	"strings"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/auth"
)

// Who sends a request. There are two identity modes:
//
//   - trusted header (the default): a gateway in front of the service has
//     authenticated the buyer and sets X-User-ID. The gateway must set the
//     header, replacing any the client sent; a request carrying it twice
//     is refused, since a gateway that appends would otherwise let the
//     client's own value through.
//   - bearer token (WithVerifier): the buyer sends Authorization: Bearer
//     <JWT>, verified here; X-User-ID is ignored.
//
// In both modes the admin sends Authorization: Bearer <admin token>. A
// bearer token that is neither the admin token nor (in token mode) a valid
// JWT is refused with 401: it never falls back to the rights of X-User-ID.

// caller is who sends a request: the admin, or a user.
type caller struct {
	UserID int64
	Admin  bool
}

// caller identifies the sender of r. A user is then checked against the
// blocklist and their rate limit: call it once per request, before any
// work. Errors: 400 for a repeated identity header or a malformed user id,
// 401 for a missing (token mode), expired, forged or wrong token, 403 for a
// blocked user, 429 for one over their limit.
func (s *Server) caller(r *http.Request) (caller, error) {
	return s.callerOf(r.Context(), netHeader(r.Header))
}

// callerOf is caller for a request of either server front (see fast.go).
func (s *Server) callerOf(ctx context.Context, h header) (caller, error) {
	token, present, err := bearer(h)
	if err != nil {
		return caller{}, err
	}
	if present && s.isAdminToken(token) {
		return caller{Admin: true}, nil
	}
	var uid int64
	switch {
	case s.verifier != nil && !present:
		return caller{}, seckill.Errorf(codeTokenMissing, "a bearer token naming the buyer is required (Authorization: Bearer <token>)")
	case s.verifier != nil:
		if uid, err = s.verifier.Verify(token); err != nil {
			return caller{}, tokenError(err)
		}
	case present:
		return caller{}, seckill.Errorf(seckill.EUNAUTHORIZED, "the bearer token is not the admin token (buyers are named by X-User-ID)")
	default:
		if uid, err = headerUser(h); err != nil {
			return caller{}, err
		}
	}
	if s.blocklist != nil && s.blocklist.Blocked(uid) {
		s.refused.blocked.Inc()
		return caller{}, seckill.Errorf(codeBlocked, "this user is blocked")
	}
	if s.userLimit != nil {
		if ok, wait := s.userLimit.Allow(ctx, uid); !ok {
			s.refused.user.Inc()
			return caller{}, &refusal{seckill.Errorf(codeRateLimited, "too many requests from this user"), wait}
		}
	}
	return caller{UserID: uid}, nil
}

func tokenError(err error) error {
	if errors.Is(err, auth.ErrExpired) {
		return seckill.Errorf(codeTokenExpired, "%v", err)
	}
	return seckill.Errorf(codeTokenInvalid, "%v", err)
}

// admin checks that r carries the admin token.
func (s *Server) admin(r *http.Request) error {
	token, present, err := bearer(netHeader(r.Header))
	switch {
	case err != nil:
		return err
	case !present:
		return seckill.Errorf(seckill.EUNAUTHORIZED, "an admin bearer token is required")
	case !s.isAdminToken(token):
		return seckill.Errorf(seckill.EUNAUTHORIZED, "the bearer token is not the admin token")
	}
	return nil
}

// IsAdmin reports whether r carries the admin token, as every admin route
// of the API takes it (the dashboard's checker asks here too).
func (s *Server) IsAdmin(r *http.Request) bool { return s.isAdmin(netHeader(r.Header)) }

// isAdmin reports whether a request's header carries the admin token.
func (s *Server) isAdmin(h header) bool {
	token, present, err := bearer(h)
	return err == nil && present && s.isAdminToken(token)
}

// isAdminToken compares in constant time; hashing first makes the time
// independent of the lengths too.
func (s *Server) isAdminToken(token string) bool {
	if s.adminToken == "" {
		return false
	}
	h := sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(h[:], s.adminHash[:]) == 1
}

// bearer returns the token of the Authorization header, if there is one.
// The scheme is case-insensitive (RFC 7235); any scheme but Bearer, and a
// header sent twice, are errors.
func bearer(h header) (token string, present bool, err error) {
	v := h.values("Authorization")
	switch len(v) {
	case 0:
		return "", false, nil
	case 1:
	default:
		return "", false, seckill.Errorf(seckill.EINVALID, "the Authorization header is sent more than once")
	}
	scheme, token, _ := strings.Cut(v[0], " ")
	token = strings.TrimLeft(token, " ")
	if !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", false, seckill.Errorf(seckill.EUNAUTHORIZED, "the Authorization header must be: Bearer <token>")
	}
	return token, true, nil
}

// headerUser parses X-User-ID, set by the shop's auth gateway.
func headerUser(h header) (int64, error) {
	v := h.values("X-User-Id")
	switch len(v) {
	case 0:
		return 0, seckill.Errorf(seckill.EINVALID, "the X-User-ID header is required")
	case 1:
	default:
		return 0, seckill.Errorf(seckill.EINVALID, "the X-User-ID header is sent more than once (a gateway must set it, not append to it)")
	}
	id, ok := parsePositive(v[0])
	if !ok {
		return 0, seckill.Errorf(seckill.EINVALID, "X-User-ID must be a positive 64-bit integer")
	}
	return id, nil
}

// header is what the guards read of a request's header: the values of a
// key in canonical form. Requests of both server fronts have one: net/http's
// (netHeader) and fasthttp's (fastHeader, fast.go).
type header interface {
	values(key string) []string
}

type netHeader http.Header

func (h netHeader) values(key string) []string { return h[key] }
