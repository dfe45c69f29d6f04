package seckill_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/seckilldev/seckill"
)

func TestOrderIDLayout(t *testing.T) {
	for _, tt := range []struct{ activity, local int64 }{
		{1, 1}, {42, 12345}, {seckill.MaxActivityID, seckill.MaxOrderLocal}, {seckill.MaxActivityID, 1},
	} {
		id := seckill.OrderID(tt.activity, tt.local)
		if id <= 0 || seckill.OrderActivity(id) != tt.activity || seckill.OrderLocal(id) != tt.local {
			t.Errorf("OrderID(%d, %d) = %d: activity %d, local %d", tt.activity, tt.local, id, seckill.OrderActivity(id), seckill.OrderLocal(id))
		}
	}
	if got := seckill.OrderID(seckill.MaxActivityID, seckill.MaxOrderLocal); got != 1<<63-1 {
		t.Errorf("largest order id %d, want 2^63-1", got)
	}
	starts := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	id := seckill.OrderID(7, 1500<<seckill.OrderSeqBits|7)
	if got := seckill.OrderTime(starts, id); !got.Equal(starts.Add(1500 * time.Millisecond)) {
		t.Errorf("OrderTime = %v, want 1.5s after the start", got)
	}
}

func TestValidateWindow(t *testing.T) {
	starts := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		window time.Duration
		code   string
	}{
		{time.Millisecond, ""},
		{seckill.MaxSaleWindow, ""},
		{seckill.MaxSaleWindow + time.Millisecond, seckill.EINVALID},
	} {
		a := seckill.Activity{Name: "a", Stock: 1, StartsAt: starts, EndsAt: starts.Add(tt.window)}
		if got := seckill.ErrorCode(a.Validate()); got != tt.code {
			t.Errorf("window %v: code %q, want %q", tt.window, got, tt.code)
		}
	}
	// The milliseconds of the longest sale fit the 36 bits of an order id.
	if ms := seckill.MaxSaleWindow.Milliseconds(); ms<<seckill.OrderSeqBits > seckill.MaxOrderLocal {
		t.Errorf("%d ms do not fit a local id", ms)
	}
}

func ExampleOrderID() {
	// Order 12345 of activity 42: the id names its activity.
	id := seckill.OrderID(42, 12345)
	fmt.Println(id, seckill.OrderActivity(id), seckill.OrderLocal(id))
	// Output: 23089744195641 42 12345
}
