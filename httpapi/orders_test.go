package httpapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/httpapi"
)

// TestMissDelay: the order routes answer 404 no sooner than the miss delay
// (made-up ids, another user's order, a cancel of an id that is no order),
// and the buyer's own order with 200; a client that goes away ends the
// wait.
func TestMissDelay(t *testing.T) {
	const delay = 300 * time.Millisecond
	a := newFuzzAPI(t, sqliteURL(t), httpapi.WithMissDelay(delay))
	serve := func(ctx context.Context, method, path, user string) (int, time.Duration) {
		t.Helper()
		req := httptest.NewRequestWithContext(ctx, method, "http://seckill.test"+path, nil)
		req.Header.Set("X-User-ID", user)
		rec := httptest.NewRecorder()
		began := time.Now()
		a.h.ServeHTTP(rec, req)
		return rec.Code, time.Since(began)
	}
	madeUp := strconv.FormatInt(seckill.OrderID(a.open, seckill.OrderLocal(a.order)+1), 10)
	for _, c := range []struct {
		name, method, path, user string
		status                   int
	}{
		{"the buyer's own order", "GET", "/api/v1/orders/" + a.orderStr, "1", http.StatusOK},
		{"another user's order", "GET", "/api/v1/orders/" + a.orderStr, "2", http.StatusNotFound},
		{"an id beyond the last issued", "GET", "/api/v1/orders/" + madeUp, "1", http.StatusNotFound},
		{"random garbage", "GET", "/api/v1/orders/987654321987654321", "1", http.StatusNotFound},
		{"a cancel of an id that is no order", "POST", "/api/v1/orders/" + madeUp + "/cancel", "1", http.StatusNotFound},
	} {
		status, took := serve(context.Background(), c.method, c.path, c.user)
		if status != c.status {
			t.Errorf("%s: %d, want %d", c.name, status, c.status)
		}
		if status == http.StatusNotFound && took < delay {
			t.Errorf("%s: answered 404 after %v, want no sooner than %v", c.name, took, delay)
		}
		t.Logf("%s: %d after %v", c.name, status, took.Round(time.Millisecond))
	}

	// A client that goes away: the wait ends with it (the delay is an
	// hour; the request must return).
	a = newFuzzAPI(t, sqliteURL(t), httpapi.WithMissDelay(time.Hour))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() {
		status, _ := serve(ctx, "GET", "/api/v1/orders/987654321987654321", "1")
		done <- status
	}()
	time.Sleep(50 * time.Millisecond)
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("a lookup whose client went away still waits after 30 s")
	}
}
