package loadgen

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/url"
	"testing"
	"time"
)

func TestClassify(t *testing.T) {
	for _, c := range []struct {
		status int
		body   string
		want   outcome
		order  int64
	}{
		{202, `{"order_id":"123456789012345678","status":"pending"}`, outAccepted, 123456789012345678},
		{200, `{ "order_id" : "42", "status":"pending"}`, outAlready, 42},
		{202, `{"status":"pending"}`, outOther, 0},
		{202, `{"order_id":42}`, outOther, 0},
		{202, `{"order_id":"0"}`, outOther, 0},
		{202, `{"order_id":"-5"}`, outOther, 0},
		{202, `{"order_id":"99999999999999999999"}`, outOther, 0},
		{409, `{"error":{"code":"sold_out","message":"sold out"}}`, outSoldOut, 0},
		{409, `{"error":{"code":"conflict"}}`, outOther, 0},
		{403, `{"error":{"code":"not_started","message":"x"}}`, outNotStarted, 0},
		{403, `{"error":{"code":"ended","message":"x"}}`, outEnded, 0},
		{403, `{"error":{"code":"unauthorized"}}`, outOther, 0},
		{404, `{"error":{"code":"not_found"}}`, outNotFound, 0},
		{400, `{"error":{"code":"invalid_argument"}}`, outInvalid, 0},
		{503, `{"error":{"code":"unavailable"}}`, outUnavailable, 0},
		{503, ``, outOther, 0}, // a proxy's 503 says nothing of what happened
		{504, `{"error":{"code":"outcome_unknown"}}`, outUnknown, 0},
		{504, ``, outOther, 0},
		{500, `{"error":{"code":"internal"}}`, outOther, 0},
	} {
		got, order := classify(c.status, []byte(c.body))
		if got != c.want || order != c.order {
			t.Errorf("classify(%d, %s) = %d, %d; want %d, %d", c.status, c.body, got, order, c.want, c.order)
		}
	}
}

func TestPickUserSpreadsFirstClicks(t *testing.T) {
	for _, share := range []float64{0, 0.3, 0.5, 0.9} {
		cfg, err := Config{URL: "http://x", ActivityID: 1, Users: 1000, RepeatShare: share, Concurrency: 8}.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		r := &run{cfg: cfg, users: make([]userState, cfg.Users)}
		w := newWorker(r, nil, 1)
		firsts := 0
		seen := make([]bool, cfg.Users)
		for i := range cfg.Requests {
			k := w.pickUser(i)
			if !seen[k] {
				seen[k] = true
				firsts++
			}
		}
		if firsts != cfg.Users {
			t.Errorf("repeat share %.1f: %d of %d users clicked in %d requests", share, firsts, cfg.Users, cfg.Requests)
		}
	}
}

// TestNoAllocations: the whole per-request path of a worker on the raw
// client allocates nothing, against a server that allocates nothing either
// (testing.AllocsPerRun counts every goroutine's allocations).
func TestNoAllocations(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const body = `{"order_id":"1234567","status":"pending"}`
	reply := fmt.Appendf(nil, "HTTP/1.1 202 Accepted\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		for {
			for { // request head, up to the empty line
				line, err := br.ReadSlice('\n')
				if err != nil {
					return
				}
				if len(line) <= 2 {
					break
				}
			}
			if _, err := c.Write(reply); err != nil {
				return
			}
		}
	}()

	base, _ := url.Parse("http://" + ln.Addr().String())
	cfg, err := Config{URL: base.String(), ActivityID: 1, Users: 100, Concurrency: 1}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	r := &run{cfg: cfg, users: make([]userState, cfg.Users), start: time.Now(), stopAt: time.Hour, ctx: context.Background()}
	cl := newRawConn(base, 1, time.Second, nil)
	defer cl.close()
	w := newWorker(r, cl, 1)
	w.grab(0, "") // connects
	i := 0
	allocs := testing.AllocsPerRun(2000, func() {
		i++
		w.grab(w.pickUser(int64(i)), "")
	})
	if r.counts[outAccepted].Load() != int64(i+1) {
		t.Fatalf("accepted %d of %d: samples %q", r.counts[outAccepted].Load(), i+1, r.samples)
	}
	if allocs > 0 {
		t.Errorf("%.2f allocations per request, want 0", allocs)
	}
}

// TestKendallTau checks the O(n log n) count against the pairs counted one
// by one.
func TestKendallTau(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{2, 3, 10, 257} {
		xs, ys := make([]int64, n), make([]int64, n)
		for i := range xs {
			xs[i], ys[i] = rng.Int64N(1e9), rng.Int64N(1e9)
		}
		var disc int
		for i := range xs {
			for j := i + 1; j < n; j++ {
				if (xs[i] < xs[j]) != (ys[i] < ys[j]) {
					disc++
				}
			}
		}
		want := 1 - 2*float64(disc)/(float64(n)*float64(n-1)/2)
		if got := kendallTau(xs, ys); math.Abs(got-want) > 1e-12 {
			t.Errorf("n %d: tau %v, want %v", n, got, want)
		}
		if got := kendallTau(xs, xs); got != 1 {
			t.Errorf("n %d: tau of an order with itself %v, want 1", n, got)
		}
	}
	if got := kendallTau([]int64{1, 2, 3}, []int64{3, 2, 1}); got != -1 {
		t.Errorf("reversed: %v, want -1", got)
	}
}
