// Package lock is a distributed lock on Redis: mutexes (reentrant or not),
// semaphores and read-write locks, each hold with a lease, a watchdog that
// renews it, a signal when it is lost, and a fencing token that lets the
// protected resource refuse a holder whose lock has gone.
//
// # Use
//
//	locks := lock.New(goredis.New(rdb))           // or rueidislock.New(client)
//	l, err := locks.Lock(ctx, "activity:42")      // waits until ctx ends
//	if err != nil { ... }                         // errors.Is(err, lock.ErrNotObtained)
//	defer l.Unlock(ctx)
//	doWork(l.Context(), l.Token())                // stop when l.Context() ends; fence with the token
//
// TryLock does not wait. Client.Semaphore and Client.RWLock give the other
// kinds; their holds are Locks too. A Client is safe for concurrent use;
// make one per Redis and share it. This module has no dependencies: the
// adapters (modules lock/goredis, lock/rueidislock) bring the client.
//
// # Leases
//
// Every hold has a lease: Redis deletes it when the lease runs out, so a
// crashed holder blocks others for one lease at most. By default a watchdog
// renews a 30 s lease every 10 s while the lock is held (WithWatchdog sets
// the lease). WithTTL gives a fixed lease instead, moved only by Extend.
// The watchdog stops before Unlock releases the lock, so no renewal ever
// follows a release; it also stops when the lock is lost and when the
// Client is closed. Each hold has its own lease: no hold (a reentrant
// owner's nested one, another permit, another reader) shortens another's.
//
// Lock.Context ends the moment the hold is known lost, with cause ErrLost:
// a renewal was refused (the key expired, was deleted or taken over), or no
// renewal succeeded within the lease (Redis unreachable), or a fixed lease
// ran out. Work done under the lock must watch it.
//
// # Waiting
//
// Waiters wait in line in Redis, whichever process they are in, and are
// given the lock in arrival order by the release (or by whoever finds the
// lock free: a holder that died), without the lock ever being free in
// between. The waiter's client learns it from one message on a channel of
// its own; no other waiter wakes up. A waiter refreshes its place while it
// waits; one that is gone (it stopped refreshing) is skipped after three
// refresh periods (10 s at most).
//
// Within one client, goroutines that Lock the same plain mutex with the
// same lease under a watchdog (the defaults) and no WithRetry form a cohort:
// one of them waits in the Redis line for all, and a hold unlocked while
// another of them waits is passed on to it in-process, without Redis, up to
// 16 times in a row; then the lock goes to another client's waiter first.
// So a waiter waits for at most 17 holds of each client ahead of it, and a
// contended lock costs two round trips (join the line, release) per visit
// of a client, shared by up to 17 acquisitions: with 8 processes of 8
// goroutines on one key, 0.12 scripts per acquisition. A hold passed on
// keeps the lease as it stands (renewed first when less than a third is
// left) and gets a fencing token of its own (see below). Other holds (a
// fixed lease, metadata, a reentrant owner, a retry strategy given with
// WithRetry, semaphores, read-write locks, Redlock) each wait in the Redis
// line, where a release passes a plain mutex to the releasing client's
// first waiter up to 8 times in a row: under contention within a process,
// fewer holds per second (see LockOption).
//
// # Reentrancy
//
// WithReentrant(owner) lets in whoever presents the same owner string while
// the owner holds the lock, in any process, with the holder's fencing token:
// the string is a password, not an identity, and the lock does not bind it
// to a client. Make it unguessable and proper to one piece of work (a
// random job ID), never a constant or a name two workers share.
//
// # Keys
//
// A lock named n lives at prefix+"{n}" (a string for a plain mutex, a hash
// otherwise); its fence counter at prefix+"{n}:fence", its line at
// prefix+"{n}:q" and prefix+"{n}:w" while someone waits. A name that
// carries its own hash tag keeps it ("stock:{a42}:lock" becomes
// prefix+"stock:{a42}:lock"), so all keys of a lock share a Redis Cluster
// slot. The default prefix is "lock:". A name is one lock: a mutex, a
// semaphore and a read-write lock cannot share it (ErrKind).
//
// # Fencing tokens
//
// Every acquisition returns a token (Lock.Token) larger than that of every
// earlier holder of the name. Tokens are not consecutive: a plain mutex
// taken by Lock on one Redis reserves 17 at once, for the holds its cohort
// passes it on to. The protected resource keeps the largest token
// it has seen and refuses a lower one; a holder that paused past its lease
// is refused instead of overwriting a newer holder's work.
//
// The rule: the resource must check (and record) the token on every access
// that the holder's decision depends on, reads included. Fencing only the
// write is not enough for a read-modify-write: a holder reads, pauses, a
// newer holder reads the same value, the old holder writes (its token is
// still the largest the resource has seen), the newer one writes, and one
// update is lost. When the read records the token, the newer holder's read
// refuses the old holder's write. In SQL, with a fence column next to the
// data:
//
//	UPDATE stock SET fence = $1 WHERE id = $2 AND fence <= $1 RETURNING qty  -- read (PostgreSQL, SQLite)
//	UPDATE stock SET qty = $3, fence = $1 WHERE id = $2 AND fence <= $1       -- write: 0 rows = refused
//
// For data in Redis, FenceLua gives scripts the same check.
//
// The token comes from a counter next to the lock, incremented by the
// acquire script. A missing counter is started one second ahead of the Redis
// clock (TIME, in microseconds) and kept for that second only, so counters
// of names no longer used disappear within a second. Tokens grow:
//
//   - with every acquisition while the counter lives, whatever the clock does
//     (Redis expires the counter by that same clock);
//   - across a restart of the counter (expired, evicted, lost in a restart)
//     as long as the Redis clock has not gone back by more than the time
//     since the last acquisition;
//   - across a failover that lost the counter's last increments, if the
//     failover took more than a second and the servers' clocks agree within
//     that margin.
//
// They can go back if the Redis clock is set back, or a replica promoted with
// a clock that lags, by more than those margins. A reentrant acquisition
// shares the token of the hold it joins. A semaphore permit's token grows per
// slot (Lock.Slot), so a resource fences permits per slot; a hold of n
// permits (Semaphore.AcquireN) fences each of its slots (Lock.Slots) with
// its one token.
//
// With Redlock every node counts on its own, so one number cannot order the
// holders; Lock.Tokens gives the token of each node, and a resource can fence
// with those (keep the largest seen per node, refuse a write below any of
// them): any two majorities share a node.
//
// # Guarantees
//
// While Redis keeps its data and its clock, and the holder's process runs
// and can reach Redis: at most one holder at a time (permits of a
// semaphore, one writer or only readers); a hold that is not released ends
// within its lease; a holder learns of the loss of its hold within a third
// of its lease (watchdog), or at its end (fixed lease). A hold that Lock
// (Acquire, RLock) returns runs at least until its ValidUntil, however long
// the waiter paused before: a grant it learns of after a later poll of its
// own found it without the lock is asked of Redis, not believed. These are
// the guarantees of a lease, and they do not survive:
//
//   - a process pause (GC, swapped or stopped VM) longer than the remaining
//     lease: the holder wakes up believing it holds a lock someone else
//     holds; its context is cancelled, but code already past its last check
//     of it still runs;
//   - a jump of the Redis clock (the lease ends early), or a wrong clock on
//     the holder (it believes the lease lasts longer);
//   - a failover: replication is asynchronous, and a lock written to a
//     master that fails before the replica got it is gone on the new master;
//     so is a lock written to a master in the moments before Sentinel
//     demotes it.
//
// This is Martin Kleppmann's critique of Redis locks, and the Redis
// documentation agrees with it. Only a resource that checks fencing tokens
// stays correct through these; a lock used for efficiency (avoid doing work
// twice) can live with them, a lock used for correctness needs the fencing
// check at the resource, or a consensus store (etcd, ZooKeeper). Redlock
// (NewRedlock) survives the loss of a minority of nodes, but not process
// pauses or clock jumps; it relies on bounded clock drift (1% of the lease
// plus 2 ms is subtracted from the validity), and on nodes that keep their
// data across a restart (see NewRedlock). A Redlock operation ends once a
// quorum of nodes has answered; Lock tries again while no quorum answers,
// until ctx ends.
//
// # Clients
//
// The package depends on the small Redis interface only. The module
// lock/goredis adapts go-redis v9 (standalone, Sentinel failover, Cluster),
// sending the calls of concurrent goroutines together in one pipeline on a
// single server's client; lock/rueidislock adapts rueidis, which pipelines
// by itself.
// Scripts are sent by SHA1, and by source once after a NOSCRIPT error (a
// restart, a failover, a new Cluster node). They also run on miniredis.
//
// # More primitives
//
// Client.Do takes a mutex, runs a function under the hold's context and
// releases it; its error matches ErrLost when the hold was lost meanwhile.
// Client.MultiLock takes several mutexes all or none, in the order of their
// keys, so that multi-locks over overlapping sets never deadlock; its hold
// has one context, a token per name and the earliest validity.
// Client.Latch is a countdown latch whose awaiters are woken by the
// CountDown that opens it, without polling.
//
// # Inspection
//
// Client.Inspect describes a lock whoever holds it (kind, holds with their
// tokens, leases, owners and metadata, waiters); Client.IsLocked is short
// for it; Client.ForceUnlock removes every hold, gives the lock to the line
// and returns what it removed.
//
// # Metrics
//
// WithHooks reports attempts (with contention), waits, renewals, losses and
// releases; the module lock/lockprom turns them into Prometheus metrics.
package lock
