package sale

import (
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// cache remembers answers for a while in bounded memory: it holds at most
// its size of entries, the one put longest ago going first (an LRU whose
// reads do not count as uses), and trusts each until its deadline. A put
// is refused if a drop came after the caller took its generation: a value
// read before this instance changed it (a payment, a cancellation) is
// never kept after the change.
type cache[K comparable, V any] struct {
	mu  sync.Mutex
	lru *simplelru.LRU[K, cached[V]]
	gen uint64 // counts the drops
}

type cached[V any] struct {
	v    V
	till time.Time
}

func newCache[K comparable, V any](size int) *cache[K, V] {
	l, err := simplelru.NewLRU[K, cached[V]](size, nil)
	if err != nil {
		panic(err) // a size below 1: a bug of the caller
	}
	return &cache[K, V]{lru: l}
}

// get returns the value of k if it is still trusted at now.
func (c *cache[K, V]) get(k K, now time.Time) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.lru.Peek(k)
	if ok && !now.Before(e.till) {
		c.lru.Remove(k)
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
	if gen == c.gen {
		c.lru.Add(k, cached[V]{v: v, till: till})
	}
}

// drop forgets k, and refuses the puts under way.
func (c *cache[K, V]) drop(k K) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.lru.Remove(k)
}

// len returns the number of entries held, expired ones not yet dropped
// included.
func (c *cache[K, V]) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}
