package lock

import (
	"errors"
	"fmt"
	"strings"
)

var (
	// ErrNotObtained means the lock is held by someone else: TryLock found it
	// taken, or Lock gave up. When Lock gives up because its context ended,
	// the error also matches the context's error.
	ErrNotObtained = errors.New("lock: not obtained")

	// ErrNotHeld is returned by Unlock, Extend and TTL when the lock is no
	// longer held: it expired, was taken over, or was already released; and
	// by Semaphore.Release when the semaphore has no live hold of the ID.
	// Releasing twice is harmless: the second call returns ErrNotHeld.
	ErrNotHeld = errors.New("lock: not held")

	// ErrLost is the cause (see context.Cause) of a lock's context when the
	// lock was lost while held: a renewal was refused, the lease ran out, or
	// Redis stayed unreachable past the lease.
	ErrLost = errors.New("lock: lost")

	// ErrClosed is returned once the Client is closed, and is the cause of the
	// contexts of the locks it still held.
	ErrClosed = errors.New("lock: client closed")

	// ErrKind means the name is held by a lock of another kind (a mutex, a
	// semaphore, a read-write lock), or by a semaphore with another number
	// of permits: a name is one lock. Errors matching it also match
	// ErrNotObtained.
	ErrKind = errors.New("lock: the name is held by another kind of lock")

	// ErrOption is matched by the error of an acquisition given options
	// that conflict (WithTTL and WithWatchdog) or do not apply (WithReentrant
	// for a semaphore), of one of n semaphore permits with n outside [1,
	// permits], and of a semaphore or read-write lock on Redlock.
	ErrOption = errors.New("lock: bad option")
)

// errKind is the error of an acquisition of l that found the name held by
// another kind of lock.
func errKind(l *Lock) error {
	return fmt.Errorf("%w: %w (%s)", ErrNotObtained, ErrKind, l.name)
}

// NodeError is the failure of one Redis node in a Redlock operation.
type NodeError struct {
	Node int // index into the nodes given to NewRedlock
	Err  error
}

func (e *NodeError) Error() string { return fmt.Sprintf("node %d: %v", e.Node, e.Err) }
func (e *NodeError) Unwrap() error { return e.Err }

// QuorumError reports a Redlock operation that did not succeed on a quorum
// of nodes. errors.Is matches any node's error: ErrNotObtained means at least
// one node had the lock taken, ErrNotHeld that at least one no longer held it.
type QuorumError struct {
	Op     string // "acquire", "extend" or "release"
	OK     int    // nodes that succeeded
	Quorum int    // nodes needed
	Nodes  []*NodeError
}

func (e *QuorumError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "lock: %s succeeded on %d nodes, %d needed", e.Op, e.OK, e.Quorum)
	for _, n := range e.Nodes {
		b.WriteString("; ")
		b.WriteString(n.Error())
	}
	return b.String()
}

// Unwrap returns the node errors.
func (e *QuorumError) Unwrap() []error {
	errs := make([]error, len(e.Nodes))
	for i, n := range e.Nodes {
		errs[i] = n
	}
	return errs
}
