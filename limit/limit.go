// Package limit is the API's admission control: rate limits per key (a
// user, a client address), kept per instance or cluster-wide in Redis, and
// a blocklist of users shared by every instance.
//
// A Local limiter is a token bucket per key (golang.org/x/time/rate) in a
// bounded LRU: it costs a lock and a map lookup, and its memory does not
// grow with the number of keys a crowd (or an attacker) brings. A Redis
// limiter is a GCRA per key (github.com/go-redis/redis_rate): one script
// call, a Redis round trip, per request, and the limit holds across
// instances. Both answer how long the client should wait when they refuse.
//
//	users := limit.NewLocal[int64](limit.Rate{PerSecond: 5, Burst: 10}, 0)
//	if ok, wait := users.Allow(ctx, uid); !ok { /* 429, Retry-After: wait */ }
package limit

import (
	"context"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	lru "github.com/hashicorp/golang-lru/v2/simplelru"
	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"
)

// Rate is a sustained rate and the burst allowed above it.
type Rate struct {
	// PerSecond is the sustained rate; 0 means no limit.
	PerSecond float64
	// Burst is how many requests may come at once after a quiet period.
	// Default: PerSecond rounded up, at least 1.
	Burst int
}

// Enabled reports whether r limits anything.
func (r Rate) Enabled() bool { return r.PerSecond > 0 }

func (r Rate) burst() int {
	if r.Burst > 0 {
		return r.Burst
	}
	return max(1, int(math.Ceil(r.PerSecond)))
}

// DefaultKeys bounds the keys a Local limiter remembers: about 200 bytes
// each. A key evicted while limited comes back with a full bucket, so the
// bound should exceed the keys active within a few seconds.
const DefaultKeys = 100_000

// Local limits each key to a Rate within this process.
type Local[K comparable] struct {
	rate Rate
	mu   sync.Mutex
	keys *lru.LRU[K, *rate.Limiter]
}

// NewLocal returns a limiter that remembers at most keys keys (0:
// DefaultKeys), the least recently seen going first.
func NewLocal[K comparable](r Rate, keys int) *Local[K] {
	if keys <= 0 {
		keys = DefaultKeys
	}
	c, _ := lru.NewLRU[K, *rate.Limiter](keys, nil) // fails only for a size <= 0
	return &Local[K]{rate: r, keys: c}
}

// Allow takes one token of k's bucket. When there is none, it says how
// long until there is.
func (l *Local[K]) Allow(_ context.Context, k K) (bool, time.Duration) {
	now := time.Now()
	l.mu.Lock()
	lim, ok := l.keys.Get(k)
	if !ok {
		lim = rate.NewLimiter(rate.Limit(l.rate.PerSecond), l.rate.burst())
		l.keys.Add(k, lim)
	}
	l.mu.Unlock()
	if lim.AllowN(now, 1) {
		return true, 0
	}
	missing := 1 - lim.TokensAt(now)
	return false, time.Duration(missing / l.rate.PerSecond * float64(time.Second))
}

// Len returns the number of keys remembered.
func (l *Local[K]) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.keys.Len()
}

// Redis limits each key to a Rate across every instance that shares the
// Redis, with a GCRA (one script call per request). If Redis fails, the
// request is let through: the grab that follows needs Redis too and will
// say unavailable itself.
type Redis[K comparable] struct {
	limiter *redis_rate.Limiter
	limit   redis_rate.Limit
	key     func(K) string
	log     *slog.Logger
	logged  atomic.Int64 // Unix nanoseconds of the last error logged
}

// NewRedis returns a cluster-wide limiter. key names k's Redis key (it is
// stored under "rate:" + key, one key per client, expiring when its bucket
// is full again).
func NewRedis[K comparable](rdb redis.UniversalClient, r Rate, key func(K) string, log *slog.Logger) *Redis[K] {
	// redis_rate counts whole events per period: an hour keeps fractional
	// rates (0.5/s is 1800 per hour) exact.
	lim := redis_rate.Limit{Rate: max(1, int(math.Round(r.PerSecond*3600))), Burst: r.burst(), Period: time.Hour}
	return &Redis[K]{limiter: redis_rate.NewLimiter(rdb), limit: lim, key: key, log: log}
}

// Allow takes one token of k's bucket in Redis.
func (l *Redis[K]) Allow(ctx context.Context, k K) (bool, time.Duration) {
	res, err := l.limiter.Allow(ctx, l.key(k), l.limit)
	if err != nil {
		if ctx.Err() != nil {
			return true, 0 // the client left; nothing to limit
		}
		// Once per 10 seconds at most: an outage must not flood the log.
		now, last := time.Now().UnixNano(), l.logged.Load()
		if now-last > int64(10*time.Second) && l.logged.CompareAndSwap(last, now) {
			l.log.Warn("rate limit: redis failed; requests pass unlimited meanwhile", "err", err)
		}
		return true, 0
	}
	if res.Allowed > 0 {
		return true, 0
	}
	return false, res.RetryAfter
}
