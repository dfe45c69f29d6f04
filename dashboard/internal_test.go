package dashboard

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// Percentiles as Prometheus' histogram_quantile computes them, over the
// grabs between two samples only.
func TestQuantile(t *testing.T) {
	bounds := []float64{.001, .002, .005, .01}
	base := sample{bounds: bounds, buckets: []float64{10, 10, 10, 10}, count: 10}
	// Since base: 50 grabs under 1ms, 40 in (1ms, 2ms], 9 in (2ms, 5ms],
	// and 1 above 10ms.
	cur := sample{bounds: bounds, buckets: []float64{60, 100, 109, 109}, count: 110}
	for _, c := range []struct {
		q    float64
		want float64
	}{
		{0.5, 1},      // rank 50: the top of the first bucket
		{0.25, 0.5},   // rank 25: half-way through it
		{0.7, 1.5},    // rank 70: half-way through (1ms, 2ms]
		{0.99, 5},     // rank 99: the top of (2ms, 5ms]
		{0.999, 10.0}, // rank 99.9: in +Inf, the highest finite bound
	} {
		if got := quantileMS(c.q, cur, base); got == nil || *got != c.want {
			t.Errorf("q %v: got %v ms, want %v", c.q, deref(got), c.want)
		}
	}
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

// A page that stops reading loses frames; the ticker and the other pages
// never wait for it.
func TestHubSlowViewer(t *testing.T) {
	h := newHub(10, time.Second) // a minute of history: 60 frames
	slow, _, _ := h.join(false)
	fast, _, _ := h.join(false)
	got := 0
	for i := range 100 {
		h.publish(fmt.Appendf(nil, `{"t":%d}`, i), nil, time.Now().UnixMilli()) // returns at once, slow or not
		<-fast.frames
		got++
	}
	if got != 100 || len(slow.frames) != cap(slow.frames) {
		t.Fatalf("fast viewer got %d of 100; slow viewer holds %d of %d", got, len(slow.frames), cap(slow.frames))
	}
	// The history holds the last minute's frames, at most.
	_, history, _ := h.join(false)
	if want := `[{"t":40},`; len(h.history) != 60 || !strings.HasPrefix(string(history), "event: history\ndata: "+want) ||
		!strings.HasSuffix(string(history), `{"t":99}]`+"\n\n") {
		t.Errorf("history of %d frames (keep %d): %.80s...", len(h.history), h.keep, history)
	}
	h.close()
	if _, ok := <-slow.frames; !ok {
		t.Fatal("slow viewer's queue closed before it was drained")
	}
	for range slow.frames {
	}
	if _, _, ok := h.join(false); ok {
		t.Error("a closed hub took a viewer")
	}
}

// A viewer with the admin token gets the frames with the errors' texts,
// in its history too; any other viewer the frames without. A frame
// without errors is one message for both.
func TestHubAdminFrames(t *testing.T) {
	h := newHub(10, time.Second)
	stranger, _, _ := h.join(false)
	admin, _, _ := h.join(true)
	f := &Frame{Time: 1, Activities: []Activity{{ID: 1}, {ID: 2}}}
	if f.forAdmin() != nil {
		t.Fatal("a frame without errors has an admin's version")
	}
	f.Errors, f.details = []string{"could not read Redis"}, []string{"could not read Redis: WRONGPASS invalid username-password pair"}
	f.Activities[1].StatesError = "orders by state unavailable"
	f.Activities[1].statesDetail = "orders by state unavailable: failed to connect to user=postgres database=shop"
	pub, _ := json.Marshal(f)
	adm, _ := json.Marshal(f.forAdmin())
	if f.Activities[1].StatesError != "orders by state unavailable" || strings.Contains(string(pub), "WRONGPASS") || strings.Contains(string(pub), "user=postgres") {
		t.Fatalf("the public frame tells the errors' texts: %s", pub)
	}
	if !strings.Contains(string(adm), "WRONGPASS") || !strings.Contains(string(adm), "user=postgres") {
		t.Fatalf("the admin's frame lacks the errors' texts: %s", adm)
	}
	h.publish(pub, adm, time.Now().UnixMilli())
	h.publish([]byte(`{"t":2}`), nil, time.Now().UnixMilli())
	for _, c := range []struct {
		v     *viewer
		admin bool
	}{{stranger, false}, {admin, true}} {
		first, second := string(<-c.v.frames), string(<-c.v.frames)
		_, history, _ := h.join(c.admin)
		if strings.Contains(first, "WRONGPASS") != c.admin || strings.Contains(string(history), "WRONGPASS") != c.admin ||
			second != "event: tick\ndata: {\"t\":2}\n\n" {
			t.Errorf("admin %v: got %q, then %q; history %q", c.admin, first, second, history)
		}
	}
}
