package lock

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"strings"
)

// Redis is the part of a Redis client the lock needs. The packages goredis
// (go-redis v9: standalone, Sentinel failover and Cluster clients) and
// rueidis implement it; a test may wrap one to inject faults.
//
// Every script the lock runs replies with an integer.
type Redis interface {
	// EvalSHA runs EVALSHA and returns the script's reply. An error whose
	// text starts with "NOSCRIPT" makes the lock send the source with Eval.
	EvalSHA(ctx context.Context, sha1 string, keys, args []string) (int64, error)

	// Eval runs EVAL and returns the script's reply.
	Eval(ctx context.Context, script string, keys, args []string) (int64, error)

	// PSubscribe subscribes to the channels matching pattern and blocks until
	// ctx ends or the subscription breaks, returning why. It calls ready each
	// time the server confirms the subscription and message with the channel
	// of every message; both must return quickly.
	PSubscribe(ctx context.Context, pattern string, ready func(), message func(channel string)) error
}

// script is a Lua script called by SHA1 with a fallback to its source.
type script struct {
	src, sha string
}

func newScript(src string) *script {
	sum := sha1.Sum([]byte(src))
	return &script{src: src, sha: hex.EncodeToString(sum[:])}
}

var (
	//go:embed scripts/acquire.lua
	acquireLua string
	//go:embed scripts/release.lua
	releaseLua string
	//go:embed scripts/extend.lua
	extendLua string
	//go:embed scripts/ttl.lua
	ttlLua string

	acquireScript = newScript(acquireLua)
	releaseScript = newScript(releaseLua)
	extendScript  = newScript(extendLua)
	ttlScript     = newScript(ttlLua)
)

// run runs s on r: EVALSHA first, EVAL when the server does not know the
// script yet (after a restart, a failover, or on a new cluster node).
func run(ctx context.Context, r Redis, s *script, keys, args []string) (int64, error) {
	v, err := r.EvalSHA(ctx, s.sha, keys, args)
	if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		v, err = r.Eval(ctx, s.src, keys, args)
	}
	return v, err
}

// hashTagged reports whether Redis Cluster would hash only a part of name:
// a '{' followed later by a '}' with at least one byte between them.
func hashTagged(name string) bool {
	i := strings.IndexByte(name, '{')
	if i < 0 {
		return false
	}
	j := strings.IndexByte(name[i+1:], '}')
	return j > 0
}

// fenceSuffix makes the key of a lock's fence counter from the lock's key.
// All keys and the channel of one lock share its hash slot: a name that
// already carries a hash tag keeps it, any other name becomes the tag
// (lock:{name}, lock:{name}:fence).
const fenceSuffix = ":fence"

// globEscape escapes the glob characters of s for PSUBSCRIBE.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
