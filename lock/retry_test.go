package lock_test

import (
	"sync"
	"testing"
	"time"

	"github.com/seckilldev/seckill/lock"
)

// The lock's other tests need Redis and live in the module lock/tests.

func TestRetryStrategies(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name string
		s    lock.RetryStrategy
		want []time.Duration // for retries 1, 2, ...
	}{
		{"none", lock.NoRetry(), []time.Duration{0}},
		{"linear", lock.LinearBackoff(5 * ms), []time.Duration{5 * ms, 5 * ms, 5 * ms}},
		{"exponential", lock.ExponentialBackoff(2*ms, 10*ms), []time.Duration{2 * ms, 4 * ms, 8 * ms, 10 * ms, 10 * ms}},
		{"limited", lock.LimitRetry(lock.LinearBackoff(ms), 2), []time.Duration{ms, ms, 0, 0}},
		{"default", lock.DefaultRetry(), []time.Duration{250 * ms, 500 * ms, time.Second, 2 * time.Second, 2 * time.Second}},
	} {
		for i, want := range tc.want {
			if got := tc.s.Backoff(i + 1); got != want {
				t.Errorf("%s: Backoff(%d) = %v, want %v", tc.name, i+1, got, want)
			}
		}
	}
	// a strategy is a value: sharing it between goroutines is safe
	s := lock.ExponentialBackoff(ms, time.Second)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for n := 1; n < 1000; n++ {
				s.Backoff(n)
			}
		})
	}
	wg.Wait()
}
