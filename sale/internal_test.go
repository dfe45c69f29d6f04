package sale

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/stock"
	"github.com/seckilldev/seckill/store"
)

// TestEndedEntriesDropped: the activity cache holds the live sales, not
// every sale ever asked for: the entries of 300 ended sales are dropped
// once they ended more than EndedTTL ago, and a live one stays.
func TestEndedEntriesDropped(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	defer rdb.Close()
	engine := stock.New(rdb, stock.Config{})
	defer engine.Close()
	const ttl = time.Millisecond
	s := New(st, engine, Config{EndedTTL: ttl}, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)

	ended := time.Now().Add(-time.Hour)
	for range 300 {
		a := seckill.Activity{Name: "past", Stock: 1, StartsAt: ended.Add(-time.Hour), EndsAt: ended}
		if err := st.CreateActivity(ctx, &a); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Grab(ctx, a.ID, 1); seckill.ErrorCode(err) != seckill.EENDED {
			t.Fatalf("grab of an ended sale: %v", err)
		}
	}
	live := seckill.Activity{Name: "live", Stock: 1, StartsAt: time.Now().Add(time.Hour), EndsAt: time.Now().Add(2 * time.Hour)}
	if err := st.CreateActivity(ctx, &live); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * ttl) // a sweep is due at the next new entry
	if _, err := s.Grab(ctx, live.ID, 1); seckill.ErrorCode(err) != seckill.ENOTSTARTED {
		t.Fatalf("grab before the start: %v", err)
	}
	s.mu.RLock()
	n, kept := len(s.entries), s.entries[live.ID] != nil
	s.mu.RUnlock()
	if n != 1 || !kept {
		t.Errorf("cache holds %d entries (live one kept: %v), want only the live sale's", n, kept)
	}
}
