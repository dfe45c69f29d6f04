// Package lock is a distributed lock on Redis: one lock per name, held by one
// holder at a time, with a lease, a watchdog that renews it, a signal when
// it is lost, and a fencing token that lets the protected resource refuse a
// holder whose lock has gone.
//
// # Use
//
//	locks := lock.New(goredis.New(rdb))           // or rueidis.New(client)
//	l, err := locks.Lock(ctx, "activity:42")      // waits until ctx ends
//	if err != nil { ... }                         // errors.Is(err, lock.ErrNotObtained)
//	defer l.Unlock(ctx)
//	doWork(l.Context(), l.Token())                // stop when l.Context() ends
//
// TryLock does not wait. A Client is safe for concurrent use; make one per
// Redis and share it.
//
// # Leases
//
// Every lock has a lease: Redis deletes it when the lease runs out, so a
// crashed holder blocks others for one lease at most. By default a watchdog
// renews a 30 s lease every 10 s while the lock is held (WithWatchdog sets
// the lease). WithTTL gives a fixed lease instead, moved only by Extend.
// The watchdog stops before Unlock releases the lock, so no renewal ever
// follows a release; it also stops when the lock is lost and when the Client
// is closed.
//
// Lock.Context ends the moment the lock is known lost, with cause ErrLost:
// a renewal was refused (the key expired, was deleted or taken over), or no
// renewal succeeded within the lease (Redis unreachable), or a fixed lease
// ran out. Work done under the lock must watch it.
//
// # Waiting
//
// Lock waits without polling. The releasing client tells waiters: within a
// client, Unlock hands the lock straight to the next waiter (one round trip,
// the lock never free) as long as no other client waits; otherwise the
// release publishes a message on a channel named like the lock key, and the
// first waiter of each client tries again. One pattern subscription per
// client carries the messages of all its locks. A jittered poll (see
// WithRetry and DefaultRetry) covers a lost message and a holder that died;
// it never sleeps much past the end of the holder's lease.
//
// # Keys
//
// A lock named n lives at prefix+"{n}" (a string, or a hash for reentrant
// locks and locks with metadata); its fence counter at prefix+"{n}:fence".
// A name that carries its own hash tag keeps it ("stock:{a42}:lock" becomes
// prefix+"stock:{a42}:lock"), so all keys of a lock share a Redis Cluster
// slot. The default prefix is "lock:".
//
// # Fencing tokens
//
// Every acquisition returns a token (Lock.Token) larger than that of every
// earlier holder of the name. Pass it with each write to the protected
// resource, and let the resource refuse a token below the largest it has
// seen: in SQL, "UPDATE ... SET fence = $t WHERE id = $id AND fence <= $t".
// That is what keeps the data safe when the lock is not: a holder that
// paused past its lease writes with a stale token and is refused.
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
// shares the token of the hold it joins.
//
// With Redlock every node counts on its own, so one number cannot order the
// holders; Lock.Tokens gives the token of each node, and a resource can fence
// with those (keep the largest seen per node, refuse a write below any of
// them): any two majorities share a node.
//
// # Guarantees
//
// While Redis keeps its data and its clock, and the holder's process runs
// and can reach Redis: at most one holder at a time; a lock that is not
// released is free again within one lease; a holder learns of the loss of
// its lock within a third of its lease (watchdog), or at its end (fixed
// lease). These are the guarantees of a lease, and they do not survive:
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
// plus 2 ms is subtracted from the validity).
//
// # Clients
//
// The package depends on the small Redis interface only. Package goredis
// adapts go-redis v9 (standalone, Sentinel failover, Cluster); package
// rueidis adapts rueidis, whose pipelining makes it the fastest. Scripts are
// sent by SHA1, and by source once after a NOSCRIPT error (a restart, a
// failover, a new Cluster node).
//
// # Metrics
//
// WithHooks reports attempts (with contention), waits, renewals, losses and
// releases; package lockprom turns them into Prometheus metrics.
package lock
