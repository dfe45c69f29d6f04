package sale

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/stock"
	"github.com/seckilldev/seckill/store"
)

// racingLoad wraps the store: right after the first Load took its
// snapshot, race runs, as a buyer's cancel racing a rebuild of Redis does.
type racingLoad struct {
	seckill.Store
	once sync.Once
	race func()
}

func (s *racingLoad) Load(ctx context.Context, id int64) (seckill.Loaded, error) {
	l, err := s.Store.Load(ctx, id)
	s.once.Do(s.race)
	return l, err
}

// TestLoadCatchesUpReturns: an order cancelled between the load's snapshot
// and its end, whose Redis half found the activity not loaded yet (and so
// counted on the load): the load gives its unit and its buyer's mark back
// all the same, once.
func TestLoadCatchesUpReturns(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	defer rdb.Close()
	engine := stock.New(rdb, stock.Config{Prefix: testenv.Prefix(t)})
	defer engine.Close()

	a := seckill.Activity{Name: "race", Stock: 3, StartsAt: time.Now().Add(-time.Minute), EndsAt: time.Now().Add(time.Hour),
		PayWithin: time.Minute, Rebuy: true}
	if err := st.CreateActivity(ctx, &a); err != nil {
		t.Fatal(err)
	}
	first, second := seckill.OrderID(a.ID, 8), seckill.OrderID(a.ID, 16)
	reqs := []seckill.OrderRequest{{OrderID: first, ActivityID: a.ID, UserID: 1}, {OrderID: second, ActivityID: a.ID, UserID: 2}}
	if _, err := st.ApplyOrders(ctx, reqs); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.Cancel(ctx, first, 1, time.Now()); err != nil { // before the snapshot
		t.Fatal(err)
	}
	race := &racingLoad{Store: st, race: func() {
		_, r, err := st.Cancel(ctx, second, 2, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if res, err := engine.Return(ctx, r); err != nil || res != stock.ReturnNotLoaded {
			t.Fatalf("Return during the load: %v, %v; want not loaded", res, err)
		}
	}}
	s := New(race, engine, Config{}, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	if err := s.load(ctx, a); err != nil {
		t.Fatal(err)
	}
	if n, err := engine.Remaining(ctx, a); err != nil || n != 3 {
		t.Errorf("redis remaining after the load: %d, %v; want 3 (both units back)", n, err)
	}
	for _, r := range []seckill.Return{
		{OrderID: first, ActivityID: a.ID, UserID: 1, Rebuy: true},
		{OrderID: second, ActivityID: a.ID, UserID: 2, Rebuy: true},
	} {
		if res, err := engine.Return(ctx, r); err != nil || res != stock.AlreadyReturned {
			t.Errorf("Return(%d) after the load: %v, %v; want already returned", r.OrderID, res, err)
		}
	}
	for uid, old := range map[int64]int64{1: first, 2: second} {
		g, err := engine.Grab(ctx, a, uid)
		if err != nil || !g.New || g.OrderID == old {
			t.Errorf("grab by user %d after the load: %+v, %v; want a new order", uid, g, err)
		}
	}
}
