package sale

import (
	"testing"
	"time"
)

// TestCache: the lookups' memory holds at most its size, dropping the
// oldest put first (a key put again is the newest, a key dropped frees
// its own); an entry expires at its deadline; a put whose generation a
// drop overtook is refused.
func TestCache(t *testing.T) {
	now := time.Now()
	later := now.Add(time.Hour)
	has := func(c *cache[int, string], k int) bool {
		_, ok := c.get(k, now)
		return ok
	}

	c := newCache[int, string](4)
	for k := range 12 {
		c.put(k, "v", later, c.generation())
		if n := c.len(); n > 4 {
			t.Fatalf("after %d puts: %d entries, want at most 4", k+1, n)
		}
	}
	for k := range 12 {
		if got, want := has(c, k), k >= 8; got != want {
			t.Errorf("key %d held: %v, want %v (the 4 put last)", k, got, want)
		}
	}
	c.put(8, "again", later, c.generation()) // drops nothing: 9, 10, 11 stay
	if v, _ := c.get(8, now); v != "again" || c.len() != 4 || !has(c, 9) || !has(c, 11) {
		t.Errorf("a key put again: value %q, %d entries, want the new value and 4 entries", v, c.len())
	}

	c = newCache[int, string](2)
	g := c.generation()
	c.put(1, "a", later, g)
	c.put(2, "b", later, g)
	c.put(3, "c", later, g) // replaces 1
	c.drop(2)
	c.put(1, "a", later, c.generation()) // in 2's place
	c.put(4, "d", later, c.generation()) // replaces 3, not 1
	if !has(c, 1) || !has(c, 4) || has(c, 3) || has(c, 2) || c.len() != 2 {
		t.Errorf("after a drop and puts: 1 %v, 4 %v, 3 %v, 2 %v, %d entries; want 1 and 4 only",
			has(c, 1), has(c, 4), has(c, 3), has(c, 2), c.len())
	}

	c = newCache[int, string](8)
	c.put(1, "a", now.Add(time.Second), c.generation())
	if _, ok := c.get(1, now.Add(time.Second)); ok {
		t.Error("an entry at its deadline: held, want expired")
	}
	if c.len() != 0 {
		t.Errorf("an expired entry asked for: %d entries left, want 0", c.len())
	}

	g = c.generation()
	c.drop(99)
	c.put(5, "stale", later, g)
	if has(c, 5) {
		t.Error("a put whose generation a drop overtook: kept, want refused")
	}
	c.put(5, "fresh", later, c.generation())
	if !has(c, 5) {
		t.Error("a put of the current generation: refused, want kept")
	}
}
