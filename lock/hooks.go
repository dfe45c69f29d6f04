package lock

import "time"

// Hooks are functions the client calls as locks come and go, for metrics
// (package lockprom implements them for Prometheus) or logs. Any may be nil.
// They run on the caller's or the watchdog's goroutine and must be quick.
// Lock names can be unbounded: do not use them as metric labels.
type Hooks struct {
	// Attempt follows every acquire round trip: d is its latency, err nil
	// (acquired), ErrNotObtained (taken: contention) or the failure.
	Attempt func(name string, d time.Duration, err error)

	// Acquire follows every TryLock and Lock: wait is the time spent in the
	// call, err nil or why it failed.
	Acquire func(name string, wait time.Duration, err error)

	// Renew follows every watchdog renewal and Extend: d is its latency, err
	// nil, ErrNotHeld (refused) or the failure.
	Renew func(name string, d time.Duration, err error)

	// Lost is called once when a held lock is known lost; cause wraps ErrLost.
	Lost func(name string, cause error)

	// Release follows every Unlock that reached Redis or passed the hold on
	// in-process (see Client.Lock): held is the time since acquisition, err
	// nil, ErrNotHeld or the failure.
	Release func(name string, held time.Duration, err error)
}
