package compare

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/lock"
)

func openBench(t *testing.T, cfg Config) *Bench {
	t.Helper()
	cfg.DB = "sqlite://" + filepath.Join(t.TempDir(), "compare.db")
	cfg.Redis = "redis://" + testenv.RedisAddr(t)
	cfg.Prefix = testenv.Prefix(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Error(err)
		}
	})
	return b
}

// A holder that pauses past its lease wakes up to find that a newer holder
// has written: its write is refused, and nothing is oversold.
func TestFenceRefusesExpiredHolder(t *testing.T) {
	b := openBench(t, Config{Stock: 1, Items: 1, LockTTL: 300 * time.Millisecond, LockWait: 100 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := b.Prepare(ctx, ActivityLock)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	it := &s.items[0]
	name := "item:" + strconv.FormatInt(it.id, 10)

	paused, err := b.locks.Lock(ctx, name, lock.WithTTL(b.cfg.LockTTL))
	if err != nil {
		t.Fatal(err)
	}
	left, _, err := s.peek(ctx, it, 1)
	if err != nil || left != 1 {
		t.Fatalf("peek: %d, %v; want 1 unit left", left, err)
	}
	time.Sleep(b.cfg.LockTTL + 100*time.Millisecond) // a GC pause, a stalled VM

	// Meanwhile the lease ran out and another buyer got the unit.
	rep, err := s.grab(ctx, it, 2)
	if err != nil || !rep.new {
		t.Fatalf("second buyer: %+v, %v; want a new order", rep, err)
	}
	// The paused holder resumes and writes what it decided before.
	oid, _ := b.ids.Next()
	err = s.record(ctx, it, 1, oid, paused.Token())
	if !errors.Is(err, errSoldOut) && !errors.Is(err, errBusy) {
		t.Fatalf("stale write: %v; want it refused", err)
	}
	tally, err := s.Count(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tally.Sold != 1 || tally.Oversold != 0 {
		t.Errorf("sold %d, oversold %d; want 1, 0", tally.Sold, tally.Oversold)
	}

	// With stock left, the refusal is the fence's alone.
	if _, err := b.db.ExecContext(ctx, b.d.q(`UPDATE compare_stock SET remaining = 5 WHERE id = ?`), it.id); err != nil {
		t.Fatal(err)
	}
	if err := s.record(ctx, it, 1, oid, paused.Token()); !errors.Is(err, errBusy) || s.fenced.Load() != 1 {
		t.Errorf("stale write with stock left: %v, %d fenced; want errBusy, 1", err, s.fenced.Load())
	}
}

// A lock held longer than LockWait makes grabs answer 503 busy.
func TestBusyWhenTheLockWaitRunsOut(t *testing.T) {
	b := openBench(t, Config{Stock: 5, Items: 1, LockWait: 50 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := b.Prepare(ctx, GlobalLock)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l, err := b.locks.TryLock(ctx, "seckill", lock.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	w := serve(s, s.ID(), "7")
	if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), `"unavailable"`) {
		t.Fatalf("got %d %s, want 503 busy", w.Code, w.Body)
	}
	if s.busy.Load() != 1 {
		t.Errorf("busy count %d, want 1", s.busy.Load())
	}
}

func TestHandler(t *testing.T) {
	b := openBench(t, Config{Stock: 1, Items: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := b.Prepare(ctx, DBOnly)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, c := range []struct {
		id     int64
		user   string
		status int
		body   string
	}{
		{s.ID(), "42", 202, `"status":"confirmed"`},
		{s.ID(), "42", 200, `"status":"confirmed"`},
		{s.ID(), "43", 409, `"code":"sold_out"`},
		{s.ID(), "042", 400, `"code":"invalid_argument"`},
		{s.ID(), "", 400, `"code":"invalid_argument"`},
		{s.ID() + 1, "44", 404, `"code":"not_found"`},
	} {
		w := serve(s, c.id, c.user)
		if w.Code != c.status || !strings.Contains(w.Body.String(), c.body) {
			t.Errorf("user %q on sale %d: got %d %s, want %d with %s", c.user, c.id, w.Code, w.Body, c.status, c.body)
		}
	}
	w := httptest.NewRecorder()
	s.ServeHTTP(w, httptest.NewRequest("GET", "/healthz", nil))
	if w.Code != http.StatusOK {
		t.Errorf("healthz: %d", w.Code)
	}
}

func serve(h http.Handler, id int64, user string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("POST", "/api/v1/activities/"+strconv.FormatInt(id, 10)+"/grab", nil)
	if user != "" {
		r.Header.Set("X-User-ID", user)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestSplit(t *testing.T) {
	for _, c := range []struct {
		units int64
		n     int
		want  string
	}{
		{100, 4, "[25 25 25 25]"},
		{10, 3, "[4 3 3]"},
		{5, 1, "[5]"},
	} {
		if got := fmt.Sprint(split(c.units, c.n)); got != c.want {
			t.Errorf("split(%d, %d) = %s, want %s", c.units, c.n, got, c.want)
		}
	}
}
