package sale

import (
	"sync"
	"time"
)

// cache remembers answers for a while in bounded memory: it holds at most
// its size of entries, the oldest put going first, and trusts each until
// its deadline. A put is refused if a drop came after the caller took its
// generation: a value read before this instance changed it (a payment, a
// cancellation) is never kept after the change.
type cache[K comparable, V any] struct {
	mu   sync.Mutex
	m    map[K]cached[V]
	ring []K // the keys in the order they were put; the next put replaces ring[next]
	next int
	gen  uint64 // counts the drops
}

type cached[V any] struct {
	v    V
	till time.Time
	slot int // its key's place in ring
}

func newCache[K comparable, V any](size int) *cache[K, V] {
	return &cache[K, V]{m: map[K]cached[V]{}, ring: make([]K, size)}
}

// get returns the value of k if it is still trusted at now.
func (c *cache[K, V]) get(k K, now time.Time) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	if ok && !now.Before(e.till) {
		delete(c.m, k)
		var zero V
		return zero, false
	}
	return e.v, ok
}

// generation is what a put of a value read from now on passes.
func (c *cache[K, V]) generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// put keeps v for k until till, unless a drop came after gen was taken.
// When the cache is full it drops the entry put longest ago.
func (c *cache[K, V]) put(k K, v V, till time.Time, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	if e, ok := c.m[k]; ok {
		c.m[k] = cached[V]{v: v, till: till, slot: e.slot}
		return
	}
	// The slot's former key may have been dropped or put again since
	// (then it has another slot): only its own entry goes.
	if old, ok := c.m[c.ring[c.next]]; ok && old.slot == c.next {
		delete(c.m, c.ring[c.next])
	}
	c.ring[c.next] = k
	c.m[k] = cached[V]{v: v, till: till, slot: c.next}
	c.next = (c.next + 1) % len(c.ring)
}

// drop forgets k, and refuses the puts under way.
func (c *cache[K, V]) drop(k K) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	delete(c.m, k)
}

// len returns the number of entries held, expired ones not yet dropped
// included.
func (c *cache[K, V]) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
