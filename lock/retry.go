package lock

import (
	"math/rand/v2"
	"time"
)

// RetryStrategy decides how long Lock waits before retry n, and when it
// gives up (see WithRetry). A strategy is a pure function of the retry
// number, so one value can be shared by any number of calls.
type RetryStrategy interface {
	// Backoff returns the longest wait before retry n (n >= 1), or zero or
	// less to give up. Lock waits a random duration between half of it and
	// all of it, and never much past the moment the holder's lease ends.
	Backoff(n int) time.Duration
}

type retryFunc func(n int) time.Duration

func (f retryFunc) Backoff(n int) time.Duration { return f(n) }

// NoRetry makes Lock attempt once, like TryLock.
func NoRetry() RetryStrategy {
	return retryFunc(func(int) time.Duration { return 0 })
}

// LinearBackoff waits d between attempts.
func LinearBackoff(d time.Duration) RetryStrategy {
	return retryFunc(func(int) time.Duration { return d })
}

// ExponentialBackoff waits min, 2*min, 4*min... between attempts, never
// more than max. A min below 1 ms counts as 1 ms.
func ExponentialBackoff(min, max time.Duration) RetryStrategy {
	if min < time.Millisecond {
		min = time.Millisecond
	}
	return retryFunc(func(n int) time.Duration {
		d := min
		for i := 1; i < n && d < max; i++ {
			d *= 2
		}
		return clamp(d, min, max)
	})
}

// LimitRetry makes at most max retries with the waits of s.
func LimitRetry(s RetryStrategy, max int) RetryStrategy {
	return retryFunc(func(n int) time.Duration {
		if n > max {
			return 0
		}
		return s.Backoff(n)
	})
}

// DefaultRetry is the strategy of Lock: retries 250 ms apart, doubling to
// 2 s (each a random wait between half of that and all of it), until ctx
// ends. They matter with Redlock only: on one Redis the waiter is given the
// lock by the release.
func DefaultRetry() RetryStrategy { return defaultRetry }

var defaultRetry = ExponentialBackoff(250*time.Millisecond, 2*time.Second)

func clamp(d, lo, hi time.Duration) time.Duration {
	return max(lo, min(d, hi))
}

// jitter returns a random duration in [d/2, d].
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}
