package idgen

import (
	"sync"
	"testing"
	"time"
)

func TestUniqueAndOrdered(t *testing.T) {
	g := New(5)
	const workers, per = 8, 20000
	ids := make([][]int64, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range per {
				id, err := g.Next()
				if err != nil {
					t.Error(err)
					return
				}
				ids[w] = append(ids[w], id)
			}
		}()
	}
	wg.Wait()
	seen := map[int64]bool{}
	for _, list := range ids {
		for i, id := range list {
			if seen[id] {
				t.Fatalf("duplicate id %d", id)
			}
			seen[id] = true
			if i > 0 && id <= list[i-1] {
				t.Fatalf("ids of one goroutine not increasing: %d after %d", id, list[i-1])
			}
			if NodeOf(id) != 5 {
				t.Fatalf("node of %d: got %d, want 5", id, NodeOf(id))
			}
		}
	}
	if d := time.Since(Time(ids[0][0])); d < -time.Second || d > time.Minute {
		t.Errorf("id time is %v away from now", d)
	}
}

func TestDistinctNodesNeverCollide(t *testing.T) {
	a, b := New(1), New(2)
	seen := map[int64]bool{}
	for range 10000 {
		x, _ := a.Next()
		y, _ := b.Next()
		if seen[x] || seen[y] || x == y {
			t.Fatal("collision between nodes")
		}
		seen[x], seen[y] = true, true
	}
}
