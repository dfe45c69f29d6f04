package dashboard

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/queue"
	"github.com/seckilldev/seckill/stock"
)

// Frame is what every page receives at each tick, as JSON. Times are Unix
// milliseconds.
type Frame struct {
	Time    int64 `json:"t"`
	TickMS  int64 `json:"tick_ms"`
	Viewers int   `json:"viewers"`
	// Grabs counts this instance's grab answers by outcome since it
	// started; Rates are per second over the last second, and P50MS and
	// P99MS the grab latency over the last second (nil when no grab was
	// answered in it). Outcomes are those of this instance: the grab
	// counters carry no activity label, which keeps the grab path cheap.
	Grabs Outcomes           `json:"grabs"`
	Rates map[string]float64 `json:"rates"`
	P50MS *float64           `json:"p50_ms"`
	P99MS *float64           `json:"p99_ms"`
	// Activities are the newest activities that have not ended more than
	// ten minutes ago, newest first.
	Activities []Activity `json:"activities"`
	// Errors says what could not be read at this tick: "could not read
	// Redis", and the like. The errors' own texts (a database's "failed
	// to connect to user=... database=..."), which tell an outsider about
	// the setup, go only to a viewer that sends the admin token (see
	// Dashboard.events), as /healthz tells only the admin.
	Errors []string `json:"errors,omitempty"`

	details []string // Errors with the errors' texts
}

// Outcomes counts grab answers: accepted (a new order, 202), already (the
// user's order again, 200), sold_out (409), rejected (any other 4xx: not
// started, ended, unknown activity, bad request, refused by a limit) and
// errors (5xx).
type Outcomes map[string]float64

// The outcome classes of Outcomes.
const (
	Accepted = "accepted"
	Already  = "already"
	SoldOut  = "sold_out"
	Rejected = "rejected"
	Errors   = "errors"
)

var classes = []string{Accepted, Already, SoldOut, Rejected, Errors}

// Activity is one activity's figures.
type Activity struct {
	ID       int64  `json:"id"`
	Name     string `json:"name"`
	Stock    int64  `json:"stock"`
	StartsAt int64  `json:"starts_at"`
	EndsAt   int64  `json:"ends_at"`
	// RedisRemaining is nil when Redis does not hold the activity (not
	// loaded yet, or retired after its end).
	RedisRemaining *int64 `json:"redis_remaining"`
	DBRemaining    int64  `json:"db_remaining"`
	// Buckets is what is left in each bucket of an activity of several
	// (seckill.Activity.Buckets), when Redis holds it.
	Buckets []int64 `json:"buckets,omitempty"`
	// Backlog counts the accepted orders not yet written to the database;
	// Lag those not yet delivered to a worker, Pending those a worker
	// holds (stock.StreamStats).
	Backlog int64 `json:"backlog"`
	Lag     int64 `json:"lag"`
	Pending int64 `json:"pending"`
	// States counts the orders in the database by state; StatesError
	// says that they could not be counted (why: to the admin alone, as
	// for Frame.Errors).
	States       seckill.StateCounts `json:"states,omitempty"`
	StatesError  string              `json:"states_error,omitempty"`
	statesDetail string
	// LastGrabAt is the time of the last accepted grab (from the last
	// order id Redis issued), SoldOutAt the same time when the stock in
	// Redis is 0: the moment the last unit went.
	LastGrabAt  *int64 `json:"last_grab_at,omitempty"`
	SoldOutAt   *int64 `json:"sold_out_at,omitempty"`
	LastOrderID string `json:"last_order_id,omitempty"`
	// Queue is the activity's waiting room, if it has one.
	Queue *Queue `json:"queue,omitempty"`
}

// Queue is an activity's waiting room as this instance last read it (the
// room's state, read every 100 ms for its own polls; nil until read).
type Queue struct {
	// Rate is the most buyers admitted a second, Hold the buyers admitted
	// and not yet bought it keeps for each unit left (0: the rate alone).
	Rate int `json:"rate"`
	Hold int `json:"hold"`
	// Joined buyers joined; Admitted of them were let through; Waiting
	// are the others.
	Joined   int64 `json:"joined"`
	Admitted int64 `json:"admitted"`
	Waiting  int64 `json:"waiting"`
	// AdmitRate is the buyers admitted a second over the last second.
	AdmitRate float64 `json:"admit_rate"`
	// Closed: admission is stopped (sold out).
	Closed bool `json:"closed"`
}

// sampler computes frames. Only Run's goroutine uses it.
type sampler struct {
	cfg     Config
	samples []sample // the last second of metric samples, oldest first

	// The database is asked less often than Redis: the list of
	// activities every second, the orders by state every two.
	listed  time.Time
	acts    []seckill.Activity
	listErr error
	counted time.Time
	counts  map[int64]stateCount
	// admits holds, per activity with a waiting room, the admitted counts
	// of the last second or so, oldest first: the admission rate.
	admits map[int64][]admitted
}

type admitted struct {
	at time.Time
	n  int64
}

type stateCount struct {
	counts seckill.StateCounts
	err    error
}

const (
	listEvery   = time.Second
	countEvery  = 2 * time.Second
	recentEnded = 10 * time.Minute
)

func newSampler(cfg Config) *sampler {
	return &sampler{cfg: cfg, counts: map[int64]stateCount{}, admits: map[int64][]admitted{}}
}

// forget drops what was read before a pause.
func (s *sampler) forget() {
	s.samples = nil
	s.listed, s.counted = time.Time{}, time.Time{}
}

func (s *sampler) frame(ctx context.Context, viewers int) *Frame {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	now := time.Now()
	f := &Frame{Time: now.UnixMilli(), TickMS: s.cfg.Tick.Milliseconds(), Viewers: viewers}
	fail := func(what string, err error) {
		f.Errors = append(f.Errors, "could not "+what)
		f.details = append(f.details, "could not "+what+": "+s.cfg.Scrub(err.Error()))
		s.cfg.Log.Debug("dashboard: "+what, "err", err)
	}
	s.metrics(f, now, fail)

	if now.Sub(s.listed) >= listEvery {
		s.listed = now
		s.acts, s.listErr = s.list(ctx, now)
	}
	if s.listErr != nil {
		fail("list the activities", s.listErr)
	}
	ids := make([]int64, len(s.acts))
	rooms := map[int64][]admitted{}
	for i, a := range s.acts {
		ids[i] = a.ID
		f.Activities = append(f.Activities, Activity{ID: a.ID, Name: a.Name, Stock: a.Stock,
			StartsAt: a.StartsAt.UnixMilli(), EndsAt: a.EndsAt.UnixMilli(), DBRemaining: a.Remaining,
			Queue: s.room(a, now, rooms)})
	}
	s.admits = rooms
	if len(ids) == 0 {
		return f
	}
	seen, err := s.cfg.Observer.Observe(ctx, s.acts, s.cfg.Tick)
	if err != nil {
		fail("read Redis", err)
	}
	if now.Sub(s.counted) >= countEvery {
		s.counted = now
		s.count(ctx, ids)
	}
	for i := range f.Activities {
		a := &f.Activities[i]
		if obs, ok := seen[a.ID]; ok {
			a.observed(obs)
		}
		c := s.counts[a.ID]
		a.States = c.counts
		if c.err != nil {
			a.StatesError = "orders by state unavailable"
			a.statesDetail = a.StatesError + ": " + s.cfg.Scrub(c.err.Error())
		}
	}
	return f
}

// room returns a's waiting room's figures (nil: none, or not read yet),
// and keeps its admitted count in rooms for the rate.
func (s *sampler) room(a seckill.Activity, now time.Time, rooms map[int64][]admitted) *Queue {
	if a.QueueRate == 0 || s.cfg.Room == nil {
		return nil
	}
	st, ok := s.cfg.Room.StateOf(queue.SaleOf(a))
	if !ok {
		return nil
	}
	q := &Queue{Rate: a.QueueRate, Hold: a.QueueHold, Joined: st.Joined, Admitted: st.Admitted,
		Waiting: max(st.Joined-st.Admitted, 0), Closed: st.Closed}
	past := s.admits[a.ID]
	cut := 0
	for cut < len(past)-1 && now.Sub(past[cut+1].at) >= time.Second {
		cut++ // keep the newest sample a second old or more as the base
	}
	past = append(past[cut:], admitted{now, st.Admitted})
	if base := past[0]; len(past) > 1 && now.Sub(base.at) > 0 {
		q.AdmitRate = float64(st.Admitted-base.n) / now.Sub(base.at).Seconds()
	}
	rooms[a.ID] = past
	return q
}

// list returns the newest activities that have not ended more than
// recentEnded ago.
func (s *sampler) list(ctx context.Context, now time.Time) ([]seckill.Activity, error) {
	acts, err := s.cfg.Store.Activities(ctx, now.Add(-recentEnded))
	if err != nil {
		return nil, err
	}
	slices.SortFunc(acts, func(a, b seckill.Activity) int { return cmp.Compare(b.ID, a.ID) })
	return acts[:min(len(acts), s.cfg.Activities)], nil
}

// observed fills in what Redis holds of a: its stock, its stream, and the
// last order Redis issued (its time: the last grab; the sell-out when the
// stock is 0).
func (a *Activity) observed(obs stock.Observation) {
	a.Backlog, a.Lag, a.Pending = obs.Stream.Backlog(), obs.Stream.Lag, obs.Stream.Pending
	if obs.Loaded {
		n := obs.Remaining
		a.RedisRemaining = &n
		a.Buckets = obs.Buckets
	}
	if obs.Seq <= 0 || obs.Seq > seckill.MaxOrderLocal {
		return // no order issued yet, or not loaded
	}
	oid := seckill.OrderID(a.ID, obs.Seq)
	at := seckill.OrderTime(time.UnixMilli(a.StartsAt), oid).UnixMilli()
	a.LastGrabAt, a.LastOrderID = &at, strconv.FormatInt(oid, 10)
	if a.RedisRemaining != nil && *a.RedisRemaining == 0 {
		a.SoldOutAt = &at
	}
}

// count refreshes the orders by state. An error (the store cannot count,
// or the database is down) is shown in place of the counts.
func (s *sampler) count(ctx context.Context, ids []int64) {
	counts := make(map[int64]stateCount, len(ids))
	for _, id := range ids {
		c, err := s.cfg.Store.StateCounts(ctx, id)
		counts[id] = stateCount{counts: c, err: err}
	}
	s.counts = counts
}

// forAdmin returns f as the admin sees it, with the errors' texts; nil
// when that is f itself (nothing failed).
func (f *Frame) forAdmin() *Frame {
	a := *f
	a.Errors = f.details
	cloned := false
	for i, act := range f.Activities {
		if act.statesDetail != "" {
			if !cloned {
				a.Activities, cloned = slices.Clone(f.Activities), true
			}
			a.Activities[i].StatesError = act.statesDetail
		}
	}
	if len(f.details) == 0 && !cloned {
		return nil
	}
	return &a
}
