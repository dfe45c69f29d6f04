package main

import (
	"bufio"
	"context"
	"io"
	"time"

	"github.com/seckilldev/seckill/auth"
)

// tokenCmd mints HS256 bearer tokens for a service run with --identity jwt
// and the same secret: to try the API with curl, or to feed a load
// generator such as wrk. A real deployment's tokens come from its identity
// provider.
func tokenCmd(_ context.Context, args []string, stdout, stderr io.Writer) error {
	var s auth.Signer
	var secret string
	fs := newFlagSet("token", stderr)
	fs.StringVar(&secret, "jwt-secret", "", "the service's HS256 secret, at least 32 bytes (prefer the environment twin to the command line, which ps shows)")
	user := fs.Int64("user", 1, "the user id of the (first) token")
	count := fs.Int("count", 1, "tokens to print, one per line: users --user, --user+1, ...")
	fs.DurationVar(&s.TTL, "ttl", time.Hour, "how long the tokens are valid")
	fs.StringVar(&s.Audience, "jwt-audience", "", "the aud claim (default: none)")
	fs.StringVar(&s.Issuer, "jwt-issuer", "", "the iss claim (default: none)")
	fs.StringVar(&s.UserClaim, "jwt-user-claim", "sub", "the claim that holds the user id")
	if err := fs.parse(args); err != nil {
		return err
	}
	switch {
	case secret == "":
		return usagef("no secret: pass --jwt-secret or set %s to the service's HS256 secret (at least %d bytes)",
			envName("jwt-secret"), auth.MinSecretLen)
	case len(secret) < auth.MinSecretLen:
		return usagef("the secret of --jwt-secret or %s is %d bytes, too short for HS256: want at least %d",
			envName("jwt-secret"), len(secret), auth.MinSecretLen)
	case *user < 1:
		return usagef("--user: %d is not a positive user id", *user)
	case *count < 1 || *count > 10_000_000:
		return usagef("--count: %d is not between 1 and 10000000", *count)
	case s.TTL <= 0:
		return usagef("--ttl: %v is not positive", s.TTL)
	}
	s.Secret = []byte(secret)
	w := bufio.NewWriter(stdout)
	for i := range int64(*count) {
		tok, err := s.Token(*user + i)
		if err != nil {
			return err
		}
		w.WriteString(tok)
		w.WriteByte('\n')
	}
	return w.Flush()
}
