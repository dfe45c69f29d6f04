package stock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/stock"
)

// TestDialWrongPassword: when Redis stops taking the password a client
// of Dial was given (rotated: requirepass changed, the connections
// dropped), every command of a pipeline says so: WRONGPASS, as a single
// command does. go-redis leaves a pipeline's commands without the error a
// new connection's AUTH got, and each read as an empty reply: the
// dashboard showed `strconv.ParseInt: parsing "": invalid syntax`, and
// the stream figures read as zeros, with no error at all.
func TestDialWrongPassword(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr, DialerRetries: 1})
	defer admin.Close()
	if err := admin.ConfigSet(ctx, "requirepass", "old-password").Err(); err != nil {
		t.Fatal(err)
	}
	rdb, err := stock.Dial(ctx, "redis://:old-password@"+srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	e := stock.New(rdb, stock.Config{Prefix: testenv.Prefix(t)})
	as := []seckill.Activity{{ID: 1}, {ID: 2}}
	if _, err := stock.NewObserver(e).Observe(ctx, as, time.Minute); err != nil {
		t.Fatalf("before the rotation: %v", err)
	}
	if err := admin.ConfigSet(ctx, "requirepass", "new-password").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.ClientKillByFilter(ctx, "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	wrongpass := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
			t.Errorf("%s: %v, want WRONGPASS", what, err)
		}
	}
	wrongpass("GET", rdb.Get(ctx, "x").Err())
	pipe := rdb.Pipeline()
	get, xlen := pipe.Get(ctx, "x"), pipe.XLen(ctx, "y")
	_, err = pipe.Exec(ctx)
	wrongpass("the pipeline", err)
	wrongpass("GET in the pipeline", get.Err())
	wrongpass("XLEN in the pipeline", xlen.Err())
	_, err = e.StatsOf(ctx, as)
	wrongpass("StatsOf", err)
	_, err = stock.NewObserver(e).Observe(ctx, as, time.Minute)
	wrongpass("Observe", err)
	if err != nil && strings.Contains(err.Error(), "ParseInt") {
		t.Errorf("Observe: %v", err)
	}
}
