package stock

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill/internal/testenv"
)

// TestScriptsExactAt2p53: the scripts handle numbers up to 2^53 exactly and
// write them as plain decimal strings, on real Redis (Lua 5.1, whose
// tostring would print 9.007199254741e+15) and on miniredis (gopher-lua).
// Real local ids stay below 2^39; this is the margin.
func TestScriptsExactAt2p53(t *testing.T) {
	for _, srv := range []struct {
		name string
		addr func(t *testing.T) string
	}{
		{"redis", func(t *testing.T) string { return testenv.RedisAddr(t) }},
		{"miniredis", func(t *testing.T) string { return miniredis.RunT(t).Addr() }},
	} {
		t.Run(srv.name, func(t *testing.T) {
			ctx := context.Background()
			rdb := redis.NewClient(&redis.Options{Addr: srv.addr(t)})
			defer rdb.Close()
			k := KeysFor(testenv.Prefix(t), 1)
			starts := time.Now().Add(-time.Minute).UnixMilli()
			ends := starts + int64(time.Hour/time.Millisecond)

			const near = 1<<53 - 10 // 9007199254740982
			n, err := loadScript.Run(ctx, rdb, []string{k.Meta, k.legacyStock, k.Orders, k.Returned, k.Returned + ":load:x"},
				starts, ends, 10, 10, Group, strconv.FormatInt(near, 10), 0, 0).Int()
			if err != nil || n != 1 {
				t.Fatalf("load: %v %v", n, err)
			}
			meta := rdb.HGetAll(ctx, k.Meta).Val()
			if meta["seq"] != "9007199254740982" {
				t.Errorf("seq after load: %q, want 9007199254740982", meta["seq"])
			}
			if !regexp.MustCompile(`^\d{16}$`).MatchString(meta["epoch"]) {
				t.Errorf("epoch %q, want a plain 16-digit decimal (microseconds)", meta["epoch"])
			}

			reply, err := grabScript.Run(ctx, rdb, []string{k.Meta, k.Buyers, k.Orders},
				"wake", "0", "1", "0", "1", "3", "101", "102", "103").Slice()
			if err != nil {
				t.Fatal(err)
			}
			want := []any{int64(0), int64(7),
				int64(0), "9007199254740983", int64(0), "9007199254740984", int64(0), "9007199254740985"}
			if fmt.Sprint(reply) != fmt.Sprint(want) {
				t.Errorf("grab reply %v, want %v", reply, want)
			}
			if got := rdb.HGet(ctx, k.Meta, "seq").Val(); got != "9007199254740985" {
				t.Errorf("seq after grab: %q, want 9007199254740985", got)
			}
			if got := rdb.HGet(ctx, k.Buyers, "102").Val(); got != "9007199254740984" {
				t.Errorf("buyer mark %q, want 9007199254740984", got)
			}
			msgs := rdb.XRange(ctx, k.Orders, "-", "+").Val()
			if len(msgs) != 3 {
				t.Fatalf("stream holds %d entries, want 3", len(msgs))
			}
			for i, m := range msgs {
				local := int64(near + 1 + i)
				id := fmt.Sprintf("%d-%d", starts+local>>3, local&7)
				if m.ID != id || m.Values["o"] != strconv.FormatInt(local, 10) {
					t.Errorf("entry %d: %s %v, want %s o=%d", i, m.ID, m.Values, id, local)
				}
			}

			// compensate.lua moves the counter past the order it is told of.
			if _, err := compensateScript.Run(ctx, rdb, []string{k.Meta, k.Buyers, k.Debt},
				"999", "9007199254740990", "", "events", "1").Result(); err != nil {
				t.Fatal(err)
			}
			if got := rdb.HGet(ctx, k.Meta, "seq").Val(); got != "9007199254740990" {
				t.Errorf("seq after compensate: %q, want 9007199254740990", got)
			}
		})
	}
}

// TestLegacyStockMoves: a sale that Redis held across the upgrade to the
// stock in meta (meta without left, the stock in its own string) is
// answered "not loaded" by grab.lua; load.lua then moves its stock into
// meta, and grabs sell it; retire.lua deletes the old string too.
func TestLegacyStockMoves(t *testing.T) {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	defer rdb.Close()
	k := KeysFor(testenv.Prefix(t), 1)
	starts := time.Now().Add(-time.Minute).UnixMilli()
	ends := starts + int64(time.Hour/time.Millisecond)
	if err := rdb.HSet(ctx, k.Meta, "starts_ms", starts, "ends_ms", ends, "stock", 10, "seq", 0, "epoch", 1).Err(); err != nil {
		t.Fatal(err)
	}
	rdb.Set(ctx, k.legacyStock, 2, 0)
	grab := func(uid string) []any {
		t.Helper()
		reply, err := grabScript.Run(ctx, rdb, []string{k.Meta, k.Buyers, k.Orders}, "wake", "0", "1", "0", "1", "1", uid).Slice()
		if err != nil {
			t.Fatal(err)
		}
		return reply
	}
	if r := grab("101"); r[0] != int64(1) {
		t.Fatalf("grab on the old layout: %v, want status 1 (not loaded)", r)
	}
	n, err := loadScript.Run(ctx, rdb, []string{k.Meta, k.legacyStock, k.Orders, k.Returned, k.Returned + ":load:x"},
		starts, ends, 10, 10, Group, "0", 0, 0).Int()
	if err != nil || n != 0 {
		t.Fatalf("load: %v %v, want 0 (loaded already)", n, err)
	}
	if left := rdb.HGet(ctx, k.Meta, MetaLeft).Val(); left != "2" || rdb.Exists(ctx, k.legacyStock).Val() != 0 {
		t.Fatalf("after the load: left %q, old key present %d; want 2 and gone", left, rdb.Exists(ctx, k.legacyStock).Val())
	}
	for i, want := range []int64{0, 0, 2} { // two sold, then sold out
		if r := grab(strconv.Itoa(201 + i)); r[0] != int64(0) || r[2] != want {
			t.Fatalf("grab %d: %v, want code %d", i, r, want)
		}
	}
	rdb.Set(ctx, k.legacyStock, 0, 0) // as if a release had left it
	if err := rdb.XGroupDestroy(ctx, k.Orders, Group).Err(); err != nil {
		t.Fatal(err)
	}
	n, err = retireScript.Run(ctx, rdb, []string{k.Meta, k.Buyers, k.Orders, k.Debt, k.Returned, k.Journal, k.Credits, k.legacyStock},
		Group, ends-int64(2*time.Hour/time.Millisecond), 0).Int()
	if err != nil || n != 1 || rdb.Exists(ctx, k.Meta, k.legacyStock).Val() != 0 {
		t.Fatalf("retire: %v %v, %d keys left", n, err, rdb.Exists(ctx, k.Meta, k.legacyStock).Val())
	}
}
