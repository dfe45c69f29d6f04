// Package queue is the waiting room in front of a sale: buyers join, wait
// their turn, and are admitted at a rate that the grab path takes; only an
// admitted buyer's grab is let through, with a pass that any instance
// verifies without Redis.
//
// The order is fair in the sense that Queue-it and Cloudflare's Waiting
// Room give the word: a buyer who joins before the start draws a random
// place (a 53-bit r, uniform, drawn once: joining again returns the same
// ticket), so that the buyers who were early are admitted in a uniformly
// random order whatever their speed or the start time's skew; the buyers
// who join after the start queue behind them, first come first served.
//
// Waiting costs the servers little: a join is one Redis script, a status
// poll none. The ticket a buyer gets at joining is signed and carries the
// buyer's place; every instance reads each room's admission state (a few
// numbers) every Config.Refresh, and answers a poll from its ticket and
// that state alone. One process at a time, the admitter (admit.go), moves
// the admission forward every tick: at most Sale.Rate buyers a second, and
// with Sale.Hold, no more than Hold units a buyer admitted but not yet
// bought for each unit left; at the sell-out it stops, and every waiting
// buyer's next poll says sold out; units that come back (a cancel, an
// expiry) open it again.
//
// Redis keys of activity id, under the hash tag {q<id>} (its own slot,
// apart from the sale's): tickets, draw, arrivals and state (see
// scripts/join.lua and scripts/admit.lua). A waiting buyer costs one field
// of the tickets hash, and a buyer who joined before the start one member
// of the draw more (see TestMemoryPerWaiter for the bytes).
package queue

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill"
)

// Error codes of the room (HTTP maps them).
const (
	EPASSREQUIRED = "pass_required"
	EPASSINVALID  = "pass_invalid"
	EPASSEXPIRED  = "pass_expired"
	ETICKET       = "ticket_invalid"
	EWORKREQUIRED = "work_required"
	EWORKINVALID  = "work_invalid"
)

var (
	// ErrPassRequired: the sale has a waiting room, and the grab no pass.
	ErrPassRequired = seckill.Errorf(EPASSREQUIRED, "this sale has a waiting room: join it, and grab with the pass it gives when your turn comes")
	// ErrPassInvalid: the pass is not this room's, or not for this user and sale.
	ErrPassInvalid = seckill.Errorf(EPASSINVALID, "the pass is not valid for this user and this sale")
	// ErrPassExpired: the pass was valid, and has expired: ask for the status again.
	ErrPassExpired = seckill.Errorf(EPASSEXPIRED, "the pass has expired: ask for your status again for a new one")
	// ErrTicket: the ticket is not this room's, or not for this user and sale.
	ErrTicket = seckill.Errorf(ETICKET, "the ticket is not valid for this user and this sale")
	// ErrWorkRequired: the room asks a proof of work to join, and none came.
	ErrWorkRequired = seckill.Errorf(EWORKREQUIRED, "joining this waiting room takes a proof of work: get a challenge, and join with its answer")
	// ErrWorkInvalid: the challenge is not this room's for this user and
	// sale, or the nonce does not answer it.
	ErrWorkInvalid = seckill.Errorf(EWORKINVALID, "the proof of work does not answer a challenge of this room for this user and this sale")
	// ErrWorkExpired: the challenge is older than WorkTTL.
	ErrWorkExpired = seckill.Errorf(EWORKINVALID, "the challenge has expired: get a new one")
)

// Config tunes a Room. Zero values take the defaults, but Key.
type Config struct {
	// Key signs tickets and passes: the same on every instance, at least
	// 32 bytes, secret.
	Key []byte
	// Prefix namespaces the Redis keys. Default "seckill".
	Prefix string
	// PassTTL is how long a pass lets its holder grab. Default 2 min.
	PassTTL time.Duration
	// HoldWindow is how long a buyer admitted and not yet bought counts
	// against a sale's Hold: after it the buyer is taken for gone (a page
	// closed), and the place goes to the next in line; the pass still lets
	// them grab, and the stock decides. Default 30 s.
	HoldWindow time.Duration
	// Refresh is how often an instance reads the admission state of the
	// rooms it answers for. Default 100 ms.
	Refresh time.Duration
	// Log receives the room's warnings. Default slog.Default().
	Log *slog.Logger
	// WorkBits, if not 0, makes joining take a proof of work: about
	// 2^WorkBits SHA-256 hashes per join (see Challenge). At most 32.
	WorkBits int
}

// DefaultHoldWindow is Config.HoldWindow's default: a buyer admitted
// clicks Buy within seconds, or has left.
const DefaultHoldWindow = 30 * time.Second

// Sale is what a room needs to know of an activity.
type Sale struct {
	ID               int64
	StartsAt, EndsAt time.Time
	// Rate is the most buyers admitted a second (at least 1).
	Rate int
	// Hold bounds the buyers admitted but not yet bought by Hold units a
	// buyer for each unit left (0: Rate alone decides).
	Hold int
}

// SaleOf returns the room's view of activity a (which has a waiting room
// when a.QueueRate > 0).
func SaleOf(a seckill.Activity) Sale {
	return Sale{ID: a.ID, StartsAt: a.StartsAt, EndsAt: a.EndsAt, Rate: a.QueueRate, Hold: a.QueueHold}
}

// Room is the waiting room of every sale that has one.
type Room struct {
	rdb  redis.UniversalClient
	key  []byte
	macs sync.Pool // of HMAC-SHA256 under key: a poll signs and checks
	cfg  Config
	join *redis.Script

	mu     sync.Mutex
	rooms  map[int64]time.Time      // the rooms whose state this instance reads, to their sale's end
	states atomic.Pointer[stateMap] // read without a lock by Status
}

type stateMap map[int64]State

// State is a room's admission state, as the admitter last wrote it.
type State struct {
	Admitted int64   // the first Admitted buyers of the order are admitted
	Draw     int64   // buyers who joined before the start; -1 until counted
	Th       float64 // a buyer of the draw is admitted when r <= Th
	Closed   bool    // admission stopped: sold out
	// Joined counts the buyers who joined: the draw and those after the
	// start (read by Refresh; Tick leaves it 0).
	Joined int64
}

var (
	//go:embed scripts/join.lua
	joinLua string
	//go:embed scripts/admit.lua
	admitLua string
)

// New returns the room over rdb.
func New(rdb redis.UniversalClient, cfg Config) (*Room, error) {
	if len(cfg.Key) < 32 {
		return nil, errors.New("queue: Config.Key must hold at least 32 bytes")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "seckill"
	}
	if cfg.WorkBits < 0 || cfg.WorkBits > 32 {
		return nil, errors.New("queue: Config.WorkBits must lie between 0 and 32")
	}
	if cfg.PassTTL <= 0 {
		cfg.PassTTL = 2 * time.Minute
	}
	if cfg.Refresh <= 0 {
		cfg.Refresh = 100 * time.Millisecond
	}
	if cfg.HoldWindow <= 0 {
		cfg.HoldWindow = DefaultHoldWindow
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	r := &Room{rdb: rdb, key: cfg.Key, cfg: cfg, join: redis.NewScript(joinLua), rooms: map[int64]time.Time{}}
	r.macs.New = func() any { return hmac.New(sha256.New, r.key) }
	r.states.Store(&stateMap{})
	return r, nil
}

// keys returns tickets, draw, arrivals and state of activity id.
func (r *Room) keys(id int64) []string {
	k := r.cfg.Prefix + ":{q" + strconv.FormatInt(id, 10) + "}:"
	return []string{k + "tickets", k + "draw", k + "arrivals", k + "state"}
}

// expiry is when a room's keys expire: a day after its sale ends.
func expiry(s Sale) int64 { return s.EndsAt.Add(24 * time.Hour).UnixMilli() }

// Ticket is a buyer's place in a room.
type Ticket struct {
	Token string // signed: the buyer shows it with every status poll
	// Drawn is true for a buyer who joined before the start (a random
	// place among them), false for one who joined after it.
	Drawn bool
	// Arrival is, for a buyer who joined after the start, their number
	// among those (1, 2, ...): the order they are admitted in, after the
	// draw. 0 for the draw.
	Arrival int64
}

// Join gives uid a ticket of s's room: the same ticket every time.
func (r *Room) Join(ctx context.Context, s Sale, uid int64) (Ticket, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return Ticket{}, err
	}
	place := binary.LittleEndian.Uint64(b[:]) >> 11 // 53 bits: exact in a double
	v, err := r.join.Run(ctx, r.rdb, r.keys(s.ID)[:3], uid, place, s.StartsAt.UnixMilli(), s.EndsAt.UnixMilli(), expiry(s)).Text()
	if err != nil {
		r.cfg.Log.Warn("waiting room: join failed", "activity", s.ID, "err", err)
		return Ticket{}, seckill.Errorf(seckill.EUNAVAILABLE, "the waiting room could not be joined: Redis did not answer; join again")
	}
	if v == "e" {
		return Ticket{}, seckill.Errorf(seckill.EENDED, "the sale has ended")
	}
	r.track(s)
	tk := Ticket{Token: r.sign(ticketFields(s.ID, uid, v)), Drawn: v[0] == 'p'}
	if !tk.Drawn {
		tk.Arrival, _ = strconv.ParseInt(v[1:], 10, 64)
	}
	return tk, nil
}

// Status is what a poll answers.
type Status struct {
	// State: "waiting", "admitted", "sold_out" or "ended".
	State string
	// Ahead is how many buyers are ahead of this one (waiting only; -1 while
	// the draw is not made: before the start); an estimate for a buyer of
	// the draw, exact for one who joined after the start.
	Ahead int64
	// Wait estimates the time until admission at the room's rate.
	Wait time.Duration
	// Pass lets the buyer grab (admitted only), until PassExpires.
	Pass        string
	PassExpires time.Time
	// RetryAfter is when to poll again.
	RetryAfter time.Duration
}

// Status answers uid's poll of s's room with ticket, from the room's state
// as this instance last read it: no Redis call.
func (r *Room) Status(s Sale, ticket string, uid int64, now time.Time) (Status, error) {
	a, u, place, ok := r.parseTicket(ticket)
	if !ok || a != s.ID || u != uid {
		return Status{}, ErrTicket
	}
	if !now.Before(s.EndsAt) {
		return Status{State: "ended"}, nil
	}
	n, err := strconv.ParseUint(place[1:], 10, 64)
	if err != nil {
		return Status{}, ErrTicket
	}
	rate := float64(max(s.Rate, 1))
	st, known := r.StateOf(s)
	if !known || st.Draw < 0 {
		// before the start (or before this instance read the room): the
		// draw is made at the start
		until := s.StartsAt.Sub(now)
		retry := clamp(until, r.cfg.Refresh, 5*time.Second)
		if until > 0 && until <= 5*time.Second && place[0] == 'p' {
			// The last poll before the start: the draw's buyers come back
			// spread over startSpread after it (by their random place),
			// not all in its first millisecond.
			retry += time.Duration(n%uint64(startSpread/time.Millisecond)) * time.Millisecond
		}
		return Status{State: "waiting", Ahead: -1, Wait: max(until, 0), RetryAfter: retry}, nil
	}
	var ahead int64
	switch place[0] {
	case 'p':
		x := float64(n)
		if x <= st.Th {
			ahead = -1
		} else {
			// the draw's r are uniform: those between Th and r are about
			// that share of the draw not yet admitted
			left := st.Draw - st.Admitted
			lo := max(st.Th, 0)
			ahead = int64(math.Round((x - lo) / (1<<53 - lo) * float64(left)))
			ahead = min(max(ahead, 0), left-1)
		}
	case 's':
		ahead = st.Draw + int64(n) - 1 - st.Admitted
	default:
		return Status{}, ErrTicket
	}
	if ahead < 0 {
		exp := now.Add(r.cfg.PassTTL)
		return Status{State: "admitted", Pass: r.pass(s.ID, uid, exp), PassExpires: exp, RetryAfter: r.cfg.PassTTL / 2}, nil
	}
	if st.Closed {
		return Status{State: "sold_out", RetryAfter: 10 * time.Second}, nil
	}
	wait := time.Duration(float64(ahead+1) / rate * float64(time.Second))
	return Status{State: "waiting", Ahead: ahead, Wait: wait, RetryAfter: clamp(wait/2, r.cfg.Refresh*2, 10*time.Second)}, nil
}

// startSpread is how long after the start the draw's buyers, told to come
// back at the start, are spread over: the admission takes its first
// second's buyers over about that second anyway.
const startSpread = time.Second

func clamp(d, lo, hi time.Duration) time.Duration { return min(max(d, lo), hi) }

// StateOf returns s's room's admission state as this instance last read
// it, and whether it has read it yet; this instance reads it from the next
// refresh on, until the sale ends (a view of the rooms, such as the
// dashboard, calls it for each sale it shows).
func (r *Room) StateOf(s Sale) (State, bool) {
	st, known := (*r.states.Load())[s.ID]
	if !known {
		r.track(s)
	}
	return st, known
}

// track makes this instance read s's room's state from the next refresh
// on, until the sale ends.
func (r *Room) track(s Sale) {
	r.mu.Lock()
	r.rooms[s.ID] = s.EndsAt
	r.mu.Unlock()
}

// States returns the admission state of every room this instance answers
// for, as it last read them.
func (r *Room) States() map[int64]State { return *r.states.Load() }

// Watch reads the state of every room this instance answers for every
// Config.Refresh, in one pipeline, until ctx ends.
func (r *Room) Watch(ctx context.Context) error {
	t := time.NewTicker(r.cfg.Refresh)
	defer t.Stop()
	failing := false
	for {
		// after a failed refresh the last state stays: polls answer from
		// it until Redis answers again
		err := r.Refresh(ctx)
		switch {
		case err != nil && !failing && ctx.Err() == nil:
			r.cfg.Log.Warn("waiting room: cannot read the admission state; polls answer from the last one", "err", err)
			failing = true
		case err == nil && failing:
			r.cfg.Log.Info("waiting room: reading the admission state again")
			failing = false
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Refresh reads the state of every room this instance answers for.
func (r *Room) Refresh(ctx context.Context) error {
	r.mu.Lock()
	ids := make([]int64, 0, len(r.rooms))
	now := time.Now()
	for id, ends := range r.rooms {
		if now.After(ends) {
			delete(r.rooms, id) // a poll answers "ended" without the state
			continue
		}
		ids = append(ids, id)
	}
	r.mu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	cmds := make([]*redis.SliceCmd, len(ids))
	arrivals := make([]*redis.StringCmd, len(ids))
	_, err := r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			k := r.keys(id)
			cmds[i] = p.HMGet(ctx, k[3], "a", "p", "th", "closed", "ms")
			arrivals[i] = p.Get(ctx, k[2])
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("queue: refresh: %w", err)
	}
	next := stateMap{}
	for i, id := range ids {
		if st, ok := parseState(cmds[i].Val()); ok {
			n, _ := arrivals[i].Int64()
			st.Joined = max(st.Draw, 0) + n
			next[id] = st
		}
	}
	r.states.Store(&next)
	return nil
}

// parseState reads an HMGET of a state hash (a, p, th, closed, ms).
func parseState(v []any) (State, bool) {
	if len(v) != 5 || v[4] == nil {
		return State{}, false // never written: the admitter has not run
	}
	str := func(i int) string { s, _ := v[i].(string); return s }
	st := State{Draw: -1, Th: parseTh(str(2)), Closed: str(3) == "1"}
	st.Admitted, _ = strconv.ParseInt(str(0), 10, 64)
	if p, err := strconv.ParseInt(str(1), 10, 64); err == nil {
		st.Draw = p
	}
	return st, true
}

// parseTh reads the state's th: "inf" (the whole draw admitted), "-1" or
// absent (none of it), or the r of the last buyer of the draw admitted.
func parseTh(th string) float64 {
	switch th {
	case "inf":
		return math.Inf(1)
	case "", "-1":
		return -1
	}
	f, err := strconv.ParseFloat(th, 64)
	if err != nil {
		return -1
	}
	return f
}
