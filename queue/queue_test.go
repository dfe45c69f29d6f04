package queue_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/internal/rediscount"
	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/queue"
)

var testKey = []byte("0123456789abcdef0123456789abcdef")

// stockLeft is a sale's remaining stock as the test sets it (the admitter
// reads it from stock.Engine in the service).
type stockLeft struct{ n atomic.Int64 }

func (s *stockLeft) Remaining(context.Context, int64) (int64, error) { return s.n.Load(), nil }

var prefix = testenv.RandHex(6)

func newRoom(t testing.TB) (*queue.Room, *rediscount.Counter, redis.UniversalClient) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() {
		ctx := context.Background()
		iter := rdb.Scan(ctx, 0, prefix+":*", 1000).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
		rdb.Close()
	})
	n := &rediscount.Counter{}
	rdb.AddHook(n)
	r, err := queue.New(rdb, queue.Config{Key: testKey, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return r, n, rdb
}

var nextID atomic.Int64

// started returns a sale that started a second ago.
func started(rate int) queue.Sale {
	now := time.Now()
	return queue.Sale{ID: nextID.Add(1), StartsAt: now.Add(-time.Second), EndsAt: now.Add(time.Hour), Rate: rate}
}

func join(t *testing.T, r *queue.Room, s queue.Sale, uid int64) queue.Ticket {
	t.Helper()
	tk, err := r.Join(context.Background(), s, uid)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func status(t *testing.T, r *queue.Room, s queue.Sale, tk queue.Ticket, uid int64) queue.Status {
	t.Helper()
	st, err := r.Status(s, tk.Token, uid, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// joinAll has buyers 1 to n join s's room, in that order.
func joinAll(t *testing.T, r *queue.Room, s queue.Sale, n int) []queue.Ticket {
	t.Helper()
	tickets := make([]queue.Ticket, n)
	for i := range tickets {
		tickets[i] = join(t, r, s, int64(i+1))
	}
	return tickets
}

// admitter returns an admitter of r's rooms whose sales have left units
// left (the test changes it), and the clock of its ticks.
func admitter(r *queue.Room, left int64) (*queue.Admitter, *stockLeft, *time.Time) {
	l := &stockLeft{}
	l.n.Store(left)
	at := time.Now()
	return r.NewAdmitter(l, 0), l, &at
}

// tick admits as if dt had passed since the last tick.
func tick(t *testing.T, a *queue.Admitter, s queue.Sale, at *time.Time, dt time.Duration) queue.State {
	t.Helper()
	*at = at.Add(dt)
	st, err := a.Tick(context.Background(), s, *at)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestJoinOnce(t *testing.T) {
	r, _, rdb := newRoom(t)
	s := started(10)
	a, b := join(t, r, s, 1), join(t, r, s, 1)
	tickets := prefix + ":{q" + strconv.FormatInt(s.ID, 10) + "}:tickets"
	if ttl := rdb.PTTL(context.Background(), tickets).Val(); ttl < time.Hour || ttl > 26*time.Hour {
		t.Fatalf("the tickets expire in %v, want a day after the sale's end (25h)", ttl)
	}
	if a.Token != b.Token {
		t.Fatalf("joining again gave another ticket: %q, then %q", a.Token, b.Token)
	}
	if c := join(t, r, s, 2); c.Token == a.Token || c.Drawn || a.Drawn {
		t.Fatalf("after the start: tickets %q and %q (drawn %v %v), want distinct and not drawn", a.Token, c.Token, a.Drawn, c.Drawn)
	}
	ended := s
	ended.ID, ended.EndsAt = nextID.Add(1), time.Now().Add(-time.Millisecond)
	if _, err := r.Join(context.Background(), ended, 1); seckill.ErrorCode(err) != seckill.EENDED {
		t.Fatalf("join after the end: %v, want %s", err, seckill.EENDED)
	}
}

// TestArrivalOrder: after the start, buyers are admitted in the order they
// joined, at the room's rate, and a poll costs no Redis command.
func TestArrivalOrder(t *testing.T) {
	r, cmds, _ := newRoom(t)
	s := started(50) // 5 a tick of 100 ms
	const n = 40
	tickets := joinAll(t, r, s, n)
	adm, _, at := admitter(r, 1000)
	tick(t, adm, s, at, 0)
	for round := 1; round <= n/5; round++ {
		st := tick(t, adm, s, at, 100*time.Millisecond)
		if st.Admitted != int64(5*round) {
			t.Fatalf("round %d: %d admitted, want %d", round, st.Admitted, 5*round)
		}
		if err := r.Refresh(context.Background()); err != nil {
			t.Fatal(err)
		}
		before := cmds.N()
		for i, tk := range tickets {
			got := status(t, r, s, tk, int64(i+1))
			want := "waiting"
			if i < 5*round {
				want = "admitted"
			}
			if got.State != want {
				t.Fatalf("round %d: buyer %d (joined %d-th) is %s, want %s", round, i+1, i+1, got.State, want)
			}
			if want == "waiting" && got.Ahead != int64(i-5*round) {
				t.Fatalf("round %d: buyer %d has %d ahead, want %d", round, i+1, got.Ahead, i-5*round)
			}
			if want == "admitted" {
				if err := r.VerifyPass(s.ID, int64(i+1), got.Pass, time.Now()); err != nil {
					t.Fatalf("round %d: buyer %d's pass: %v", round, i+1, err)
				}
			}
		}
		if d := cmds.N() - before; d != 0 {
			t.Fatalf("%d status polls sent %d Redis commands, want 0", n, d)
		}
	}
}

// TestLateTickDoesNotBurst: a tick that comes late (a paused admitter, a
// new leader) admits two ticks' worth at most, not the time it missed:
// the grab path never sees more than the rate and two ticks in a second.
func TestLateTickDoesNotBurst(t *testing.T) {
	r, _, _ := newRoom(t)
	s := started(50) // 5 a tick of 100 ms
	joinAll(t, r, s, 40)
	adm, _, at := admitter(r, 1000)
	tick(t, adm, s, at, 0)
	if st := tick(t, adm, s, at, 100*time.Millisecond); st.Admitted != 5 {
		t.Fatalf("%d admitted after one tick, want 5", st.Admitted)
	}
	if st := tick(t, adm, s, at, 130*time.Millisecond); st.Admitted != 11 {
		t.Fatalf("%d admitted after a tick 30 ms late, want 11 (its 130 ms)", st.Admitted)
	}
	if st := tick(t, adm, s, at, 800*time.Millisecond); st.Admitted != 21 {
		t.Fatalf("%d admitted after a tick 700 ms late, want 21 (two ticks more)", st.Admitted)
	}
}

// TestDrawIsUniform: buyers who join before the start are admitted in a
// uniformly random order: over many rooms, the place of admission of the
// first (and of the last) to join is uniform over the places.
func TestDrawIsUniform(t *testing.T) {
	r, _, _ := newRoom(t)
	const rooms, buyers = 300, 6
	// The buyers join a sale that starts in an hour; the admitter is told
	// it has started (admit.lua counts the draw at its first tick after
	// the start): the draw is what a real start would find.
	start := time.Now().Add(time.Hour)
	sales := make([]queue.Sale, rooms)
	tickets := make([][]queue.Ticket, rooms)
	for i := range sales {
		sales[i] = queue.Sale{ID: nextID.Add(1), StartsAt: start, EndsAt: start.Add(time.Hour), Rate: 10}
		for u := range buyers {
			tk := join(t, r, sales[i], int64(u+1))
			if !tk.Drawn {
				t.Fatalf("a buyer who joined %v before the start was not drawn", time.Until(start))
			}
			tickets[i] = append(tickets[i], tk)
		}
		sales[i].StartsAt = time.Now().Add(-time.Second)
	}
	adm, _, _ := admitter(r, 1000)
	first, last := make([]float64, buyers), make([]float64, buyers)
	for i, s := range sales {
		at := time.Now()
		tick(t, adm, s, &at, 0)
		place := make([]int, buyers)
		for k := range buyers {
			tick(t, adm, s, &at, 100*time.Millisecond) // one buyer a tick
			if err := r.Refresh(context.Background()); err != nil {
				t.Fatal(err)
			}
			for u := range buyers {
				if status(t, r, s, tickets[i][u], int64(u+1)).State == "admitted" && place[u] == 0 {
					place[u] = k + 1
				}
			}
		}
		for u, p := range place {
			if p == 0 {
				t.Fatalf("room %d: buyer %d not admitted after %d ticks of one", i, u+1, buyers)
			}
		}
		first[place[0]-1]++
		last[place[buyers-1]-1]++
	}
	for _, c := range []struct {
		who    string
		counts []float64
	}{{"first to join", first}, {"last to join", last}} {
		chi := 0.0
		e := float64(rooms) / buyers
		for _, o := range c.counts {
			chi += (o - e) * (o - e) / e
		}
		// 5 degrees of freedom: P(chi2 > 30.9) = 1e-5; an unshuffled
		// order gives 1500
		if chi > 30.9 {
			t.Errorf("the %s's place of admission over %d rooms: %v, chi-square %.1f: not uniform", c.who, rooms, c.counts, chi)
		}
		t.Logf("%s: places %v, chi-square %.2f (5 dof)", c.who, c.counts, chi)
	}
}

// TestSoldOutStopsAdmission: at the sell-out every waiting buyer is told
// sold out; a unit that comes back admits the next in line.
func TestSoldOutStopsAdmission(t *testing.T) {
	r, _, _ := newRoom(t)
	s := started(10) // one a tick
	tickets := joinAll(t, r, s, 5)
	adm, left, at := admitter(r, 2)
	tick(t, adm, s, at, 0)
	tick(t, adm, s, at, 100*time.Millisecond)
	tick(t, adm, s, at, 100*time.Millisecond) // buyers 1 and 2 admitted
	left.n.Store(0)
	if st := tick(t, adm, s, at, 100*time.Millisecond); !st.Closed || st.Admitted != 2 {
		t.Fatalf("sold out: state %+v, want closed with 2 admitted", st)
	}
	if err := r.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"admitted", "admitted", "sold_out", "sold_out", "sold_out"} {
		if got := status(t, r, s, tickets[i], int64(i+1)).State; got != want {
			t.Fatalf("after the sell-out, buyer %d: %s, want %s", i+1, got, want)
		}
	}
	left.n.Store(1) // a cancelled order's unit came back
	if st := tick(t, adm, s, at, 100*time.Millisecond); st.Closed || st.Admitted != 3 {
		t.Fatalf("a unit back: state %+v, want open with 3 admitted", st)
	}
	if err := r.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := status(t, r, s, tickets[2], 3).State; got != "admitted" {
		t.Fatalf("a unit back: buyer 3 is %s, want admitted", got)
	}
	if got := status(t, r, s, tickets[3], 4).State; got != "waiting" {
		t.Fatalf("a unit back: buyer 4 is %s, want waiting", got)
	}
}

// TestHoldBoundsAdmission: with Hold k, no more than k buyers a unit left
// are admitted and not yet bought, within the hold window.
func TestHoldBoundsAdmission(t *testing.T) {
	r, _, _ := newRoom(t)
	s := started(1000) // 100 a tick: the hold decides
	s.Hold = 2
	joinAll(t, r, s, 50)
	adm, left, at := admitter(r, 5)
	tick(t, adm, s, at, 0)
	if st := tick(t, adm, s, at, 100*time.Millisecond); st.Admitted != 10 {
		t.Fatalf("hold 2, 5 left: %d admitted, want 10", st.Admitted)
	}
	if st := tick(t, adm, s, at, 100*time.Millisecond); st.Admitted != 10 {
		t.Fatalf("nobody bought: %d admitted, want still 10", st.Admitted)
	}
	left.n.Store(3) // two bought: 8 outstanding, room for 6 - 8 < 0
	if st := tick(t, adm, s, at, 100*time.Millisecond); st.Admitted != 10 {
		t.Fatalf("2 bought, 3 left: %d admitted, want 10 (8 outstanding > 2 x 3)", st.Admitted)
	}
	left.n.Store(0)
	for range 3 {
		tick(t, adm, s, at, 100*time.Millisecond)
	}
	// 5 bought in all, of 10 admitted; 4 units back (cancelled or expired
	// orders): room for 2 x 4 - 5 more
	left.n.Store(4)
	if st := tick(t, adm, s, at, 100*time.Millisecond); st.Admitted != 13 {
		t.Fatalf("4 back: %d admitted, want 13", st.Admitted)
	}
	// Nobody buys for the hold window: the 8 outstanding are taken for
	// gone (closed pages), and the hold lets 2 x 4 more in.
	if st := tick(t, adm, s, at, 20*time.Second); st.Admitted != 13 {
		t.Fatalf("20 s without a purchase: %d admitted, want still 13", st.Admitted)
	}
	tick(t, adm, s, at, 11*time.Second)
	if st := tick(t, adm, s, at, 100*time.Millisecond); st.Admitted != 21 {
		t.Fatalf("after the hold window: %d admitted, want 21", st.Admitted)
	}
}

func TestPass(t *testing.T) {
	r, _, _ := newRoom(t)
	s := started(10)
	tk := join(t, r, s, 7)
	adm, _, at := admitter(r, 10)
	tick(t, adm, s, at, 0)
	tick(t, adm, s, at, 100*time.Millisecond)
	if err := r.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := status(t, r, s, tk, 7)
	if st.State != "admitted" {
		t.Fatalf("state %s, want admitted", st.State)
	}
	now := time.Now()
	for _, c := range []struct {
		name     string
		activity int64
		uid      int64
		pass     string
		at       time.Time
		want     error
	}{
		{"valid", s.ID, 7, st.Pass, now, nil},
		{"another user", s.ID, 8, st.Pass, now, queue.ErrPassInvalid},
		{"another sale", s.ID + 1, 7, st.Pass, now, queue.ErrPassInvalid},
		{"expired", s.ID, 7, st.Pass, st.PassExpires, queue.ErrPassExpired},
		{"tampered", s.ID, 7, strings.Replace(st.Pass, ".7.", ".8.", 1), now, queue.ErrPassInvalid},
		{"a ticket", s.ID, 7, tk.Token, now, queue.ErrPassInvalid},
		{"garbage", s.ID, 7, "x", now, queue.ErrPassInvalid},
		{"none", s.ID, 7, "", now, queue.ErrPassRequired},
	} {
		if err := r.VerifyPass(c.activity, c.uid, c.pass, c.at); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	other, err := queue.New(redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)}), queue.Config{Key: []byte(strings.Repeat("k", 32))})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.VerifyPass(s.ID, 7, st.Pass, now); !errors.Is(err, queue.ErrPassInvalid) {
		t.Errorf("a pass of another key: %v, want %v", err, queue.ErrPassInvalid)
	}
	if _, err := r.Status(s, tk.Token, 8, now); !errors.Is(err, queue.ErrTicket) {
		t.Errorf("someone else's ticket: %v, want %v", err, queue.ErrTicket)
	}
}

// TestMemoryPerWaiter measures the Redis bytes of a waiting buyer: after the
// start (a field of the tickets hash) and before it (and a member of the
// draw).
func TestMemoryPerWaiter(t *testing.T) {
	r, _, rdb := newRoom(t)
	const n = 10000
	ctx := context.Background()
	usage := func(s queue.Sale) float64 {
		var total int64
		keys, err := rdb.Keys(ctx, prefix+":{q"+strconv.FormatInt(s.ID, 10)+"}:*").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			b, err := rdb.MemoryUsage(ctx, k, 0).Result()
			if err != nil {
				t.Fatal(err)
			}
			total += b
		}
		return float64(total) / n
	}
	after := started(10)
	start := time.Now().Add(time.Hour)
	before := queue.Sale{ID: nextID.Add(1), StartsAt: start, EndsAt: start.Add(time.Hour), Rate: 10}
	for _, s := range []queue.Sale{after, before} {
		for u := range n {
			if _, err := r.Join(ctx, s, int64(u+1)); err != nil {
				t.Fatal(err)
			}
		}
	}
	a, b := usage(after), usage(before)
	t.Logf("Redis bytes per waiting buyer: %.0f joined after the start, %.0f before", a, b)
	if a > 120 || b > 250 {
		t.Errorf("bytes per waiting buyer: %.0f after the start (want <= 120), %.0f before (want <= 250)", a, b)
	}
}

// TestProofOfWork: with WorkBits, a join's proof answers a challenge of
// this room for this buyer and sale, issued within WorkTTL.
func TestProofOfWork(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() { rdb.Close() })
	r, err := queue.New(rdb, queue.Config{Key: testKey, Prefix: prefix, WorkBits: 12})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	c, bits := r.Challenge(5, 7, now)
	if bits != 12 || c == "" {
		t.Fatalf("challenge %q of %d bits, want one of 12", c, bits)
	}
	nonce := queue.Solve(c, bits)
	wrong := "0"
	for queue.Solves(c, wrong, bits) {
		wrong += "0"
	}
	other, _ := r.Challenge(5, 8, now)
	for _, tc := range []struct {
		name             string
		activity, uid    int64
		challenge, nonce string
		at               time.Time
		want             error
	}{
		{"answered", 5, 7, c, nonce, now, nil},
		{"no proof", 5, 7, "", "", now, queue.ErrWorkRequired},
		{"a wrong nonce", 5, 7, c, wrong, now, queue.ErrWorkInvalid},
		{"another buyer's challenge", 5, 7, other, queue.Solve(other, bits), now, queue.ErrWorkInvalid},
		{"another sale", 6, 7, c, nonce, now, queue.ErrWorkInvalid},
		{"expired", 5, 7, c, nonce, now.Add(queue.WorkTTL + time.Second), queue.ErrWorkExpired},
		{"forged", 5, 7, strings.Replace(c, ".7.", ".8.", 1), nonce, now, queue.ErrWorkInvalid},
	} {
		if err := r.VerifyWork(tc.activity, tc.uid, tc.challenge, tc.nonce, tc.at); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	free, _, _ := newRoom(t)
	if c, bits := free.Challenge(5, 7, now); c != "" || bits != 0 || free.VerifyWork(5, 7, "", "", now) != nil {
		t.Errorf("a room without work: challenge %q of %d bits, want none, and joins without proof", c, bits)
	}
}

// TestTickAll: a round of the admitter over many sales ticks each of them
// (several at once) and admits in each.
func TestTickAll(t *testing.T) {
	r, _, _ := newRoom(t)
	sales := make([]queue.Sale, 40)
	for i := range sales {
		sales[i] = started(1000)
		join(t, r, sales[i], 1)
	}
	adm, _, _ := admitter(r, 100)
	for round := range 2 {
		if round > 0 {
			time.Sleep(20 * time.Millisecond) // at 1,000 a second: room for the one buyer
		}
		for i, err := range adm.TickAll(context.Background(), sales) {
			if err != nil {
				t.Fatalf("round %d, sale %d: %v", round, i, err)
			}
		}
	}
	if err := r.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, s := range sales {
		if st, ok := r.StateOf(s); !ok || st.Admitted != 1 {
			t.Errorf("sale %d: %+v (read: %v), want its one buyer admitted", s.ID, st, ok)
		}
	}
}
