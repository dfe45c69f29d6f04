package stock

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/internal/testenv"
)

func TestSlot(t *testing.T) {
	// The examples of Redis' CLUSTER KEYSLOT documentation.
	for tag, want := range map[string]int{"somekey": 11058, "hash_tag": 2515, "123456789": 12739} {
		if got := slot(tag); got != want {
			t.Errorf("slot(%q) = %d, want %d", tag, got, want)
		}
	}
}

func TestBucketTags(t *testing.T) {
	for _, n := range []int{2, 3, 16, 100, seckill.MaxBuckets} {
		for _, id := range []int64{1, 77, seckill.MaxActivityID} {
			seen := map[string]bool{}
			for b := range n {
				tag := bucketTag(id, n, b)
				s := slot(tag)
				if lo, hi := b*clusterSlots/n, (b+1)*clusterSlots/n; s < lo || s >= hi {
					t.Fatalf("bucket %d of %d of activity %d: tag %q has slot %d, outside [%d, %d)", b, n, id, tag, s, lo, hi)
				}
				if seen[tag] {
					t.Fatalf("bucket %d of %d of activity %d: tag %q used twice", b, n, id, tag)
				}
				seen[tag] = true
			}
		}
	}
	if k := BucketKeys("p", 5, 1, 0); k != KeysFor("p", 5) {
		t.Errorf("one bucket: keys %+v, want KeysFor's %+v", k, KeysFor("p", 5))
	}
}

func TestHomeSpread(t *testing.T) {
	const n, users = 16, 160_000
	counts := make([]int, n)
	for uid := int64(1); uid <= users; uid++ {
		counts[Home(uid, n)]++
	}
	for b, c := range counts {
		// 10,000 expected; 5 standard deviations is about 490.
		if c < 9_500 || c > 10_500 {
			t.Errorf("bucket %d is home to %d of %d consecutive users, want about %d", b, c, users, users/n)
		}
	}
	if Home(42, 1) != 0 || Home(-3, 7) < 0 {
		t.Error("Home out of range")
	}
}

// TestJournalRecovered: a transfer whose process died after taking the
// units out of the sender (its journal holds it) is completed by the next
// borrow that reads it, once, and its units are sold, not lost.
func TestJournalRecovered(t *testing.T) {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() { rdb.Close() })
	e := New(rdb, Config{Prefix: testenv.Prefix(t)})
	t.Cleanup(e.Close)
	now := time.Now()
	a := seckill.Activity{ID: 3, Name: "t", Stock: 2, Remaining: 2, StartsAt: now.Add(-time.Minute), EndsAt: now.Add(time.Hour), Buckets: 2}
	if ok, err := e.Load(ctx, a, nil); err != nil || !ok {
		t.Fatalf("load: %v %v", ok, err)
	}
	s := e.layout(&a)
	src := s.keys[1]
	if n, err := xferOutScript.Run(ctx, rdb, []string{src.Meta, src.Journal}, 1, "dead", 0).Int(); err != nil || n != 1 {
		t.Fatalf("xfer_out: %d %v", n, err)
	}
	// Users homed in bucket 0: the first takes its unit, the second the
	// one in the journal, the third finds none.
	var users []int64
	for uid := int64(1); len(users) < 3; uid++ {
		if Home(uid, 2) == 0 {
			users = append(users, uid)
		}
	}
	for i, uid := range users {
		res, err := e.Grab(ctx, a, uid)
		switch {
		case i < 2 && (err != nil || !res.New):
			t.Fatalf("grab %d (user %d): %+v %v, want a new order", i, uid, res, err)
		case i == 2 && err != ErrSoldOut:
			t.Fatalf("grab %d (user %d): %+v %v, want sold out", i, uid, res, err)
		}
	}
	if n, _ := rdb.HLen(ctx, src.Journal).Result(); n != 0 {
		t.Errorf("journal of the sender holds %d transfers after the recovery, want 0", n)
	}
	lv, err := e.levels(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if q := units(lv); q != 0 || lv[0].in != 1 || lv[1].out != 1 {
		t.Errorf("after the sell-out: Q %d, levels %+v; want Q 0, one unit out of bucket 1 and into 0", q, lv)
	}
	// Completing it again changes nothing: the credit is the receipt.
	if err := e.credit(ctx, s, 1, 0, "dead", 1); err != nil {
		t.Fatal(err)
	}
	if left, _ := e.Remaining(ctx, a); left != 0 {
		t.Errorf("a second credit of the transfer gave %d units, want 0", left)
	}
}
