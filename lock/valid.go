package lock

import "time"

// ValidUntil returns the time before which the lock is surely held, by this
// process's clock: when the last successful acquire or renewal was sent
// (for a lock given to a waiter in line, its last request before the
// grant), plus the lease, minus the clock drift allowance. It is the zero
// time once
// the lock was released or lost. Code that must not act after the lease
// (for example, issue ids under a leased node number) compares the time of
// each action with it, which also catches a process that was paused past
// its lease before the watchdog could notice.
func (l *Lock) ValidUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return time.Time{}
	}
	return l.validUntil
}
