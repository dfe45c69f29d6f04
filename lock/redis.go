package lock

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"strings"
)

// Redis is the part of a Redis client the lock needs. The modules goredis
// (go-redis v9: standalone, Sentinel failover and Cluster clients) and
// rueidislock (rueidis) implement it; a test may wrap one to inject faults.
type Redis interface {
	// EvalSHA runs EVALSHA of a script that replies with an integer. An
	// error whose text starts with "NOSCRIPT" makes the lock send the
	// source with Eval.
	EvalSHA(ctx context.Context, sha1 string, keys, args []string) (int64, error)

	// Eval runs EVAL of a script that replies with an integer.
	Eval(ctx context.Context, script string, keys, args []string) (int64, error)

	// EvalSHAStrings runs EVALSHA of a script that replies with an array
	// of strings (semaphores, inspection); NOSCRIPT as for EvalSHA.
	EvalSHAStrings(ctx context.Context, sha1 string, keys, args []string) ([]string, error)

	// EvalStrings runs EVAL of a script that replies with an array of
	// strings.
	EvalStrings(ctx context.Context, script string, keys, args []string) ([]string, error)

	// Subscribe subscribes to channel and blocks until ctx ends or the
	// subscription breaks, returning why. It calls ready each time the
	// server confirms the subscription, and message with the payload of
	// every message; both must return quickly.
	Subscribe(ctx context.Context, channel string, ready func(), message func(payload string)) error
}

// script is a Lua script called by SHA1 with a fallback to its source.
type script struct {
	src, sha string
}

// newScript makes a script of core.lua, fast (a fast path, may be empty),
// contended.lua and lib.lua before body: a Redis script cannot include
// another (see core.lua).
func newScript(fast, body string) *script { return composeScript("", fast, body) }

// composeScript is newScript with free, an uncontended case, right after
// core.lua: it does not pay for defining the functions of the others.
func composeScript(free, fast, body string) *script {
	src := coreLua + "\n" + free + "\n" + contendedLua + "\n" + fast + "\n" + libLua + "\n" + body
	sum := sha1.Sum([]byte(src))
	return &script{src: src, sha: hex.EncodeToString(sum[:])}
}

var (
	//go:embed scripts/core.lua
	coreLua string
	//go:embed scripts/contended.lua
	contendedLua string
	//go:embed scripts/lib.lua
	libLua string
	//go:embed scripts/acquire_free.lua
	acquireFreeLua string
	//go:embed scripts/release_free.lua
	releaseFreeLua string
	//go:embed scripts/acquire_fast.lua
	acquireFastLua string
	//go:embed scripts/acquire.lua
	acquireLua string
	//go:embed scripts/release_fast.lua
	releaseFastLua string
	//go:embed scripts/release.lua
	releaseLua string
	//go:embed scripts/release_id.lua
	releaseIDLua string
	//go:embed scripts/cancel.lua
	cancelLua string
	//go:embed scripts/extend.lua
	extendLua string
	//go:embed scripts/ttl.lua
	ttlLua string
	//go:embed scripts/inspect.lua
	inspectLua string
	//go:embed scripts/force.lua
	forceLua string

	acquireScript   = composeScript(acquireFreeLua, acquireFastLua, acquireLua)
	releaseScript   = composeScript(releaseFreeLua, releaseFastLua, releaseLua)
	releaseIDScript = newScript("", releaseIDLua)
	cancelScript    = newScript("", cancelLua)
	extendScript    = newScript("", extendLua)
	ttlScript       = newScript("", ttlLua)
	inspectScript   = newScript("", inspectLua)
	forceScript     = newScript("", forceLua)
)

// run runs s on r: EVALSHA first, EVAL when the server does not know the
// script yet (after a restart, a failover, or on a new cluster node).
func run(ctx context.Context, r Redis, s *script, keys, args []string) (int64, error) {
	v, err := r.EvalSHA(ctx, s.sha, keys, args)
	if err != nil && noScript(err) {
		v, err = r.Eval(ctx, s.src, keys, args)
	}
	return v, err
}

// runStrings is run for scripts that reply with an array of strings.
func runStrings(ctx context.Context, r Redis, s *script, keys, args []string) ([]string, error) {
	v, err := r.EvalSHAStrings(ctx, s.sha, keys, args)
	if err != nil && noScript(err) {
		v, err = r.EvalStrings(ctx, s.src, keys, args)
	}
	return v, err
}

func noScript(err error) bool { return strings.HasPrefix(err.Error(), "NOSCRIPT") }

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

// Suffixes of a lock's other keys (see scripts/core.lua). All keys of one
// lock share its hash slot: a name that already carries a hash tag keeps
// it, any other name becomes the tag (lock:{name}, lock:{name}:fence).
const (
	fenceSuffix = ":fence"
	queueSuffix = ":q"
	waitSuffix  = ":w"
)

// keys returns the four keys of the lock called name.
func (c *Client) keys(name string) [4]string {
	k := c.prefix + name
	if !hashTagged(name) {
		k = c.prefix + "{" + name + "}"
	}
	return [4]string{k, k + fenceSuffix, k + queueSuffix, k + waitSuffix}
}
