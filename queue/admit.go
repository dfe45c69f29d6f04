package queue

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill/lock"
)

// Stock tells the admitter how much of a sale is left.
type Stock interface {
	Remaining(ctx context.Context, activityID int64) (int64, error)
}

// Admitter moves the admission of the rooms forward, a tick at a time. One
// process at a time should run it (Run elects it with the lock library);
// two at once for a moment, a leader paused past its lease and its
// successor, admit at most twice the rate for that moment: admission only
// moves forward (admit.lua), and the stock, not the room, is what keeps a
// sale from selling more than it has.
type Admitter struct {
	room  *Room
	stock Stock
	tick  time.Duration
	admit *redis.Script

	mu    sync.Mutex
	sales map[int64]*pace
}

// pace is what the admitter remembers of a sale between ticks.
type pace struct {
	last      time.Time
	carry     float64  // admissions allowed and not yet made (below 1)
	remaining int64    // the stock left at the last tick (-1: no tick yet)
	bought    int64    // the sum of the stock's drops between ticks
	samples   []sample // the last Config.HoldWindow of ticks, oldest first
}

type sample struct {
	at       time.Time
	admitted int64
	bought   int64 // units bought since the first tick: the stock's drops
}

// DefaultTick is how often Run admits.
const DefaultTick = 100 * time.Millisecond

// NewAdmitter returns an admitter of r's rooms that reads what is left of
// each sale from stock, and admits every tick (0: DefaultTick).
func (r *Room) NewAdmitter(stock Stock, tick time.Duration) *Admitter {
	if tick <= 0 {
		tick = DefaultTick
	}
	return &Admitter{room: r, stock: stock, tick: tick, admit: redis.NewScript(admitLua), sales: map[int64]*pace{}}
}

// Tick admits s's next buyers, as many as the rate allows since the last
// tick and, with s.Hold, the stock left; at the sell-out it stops the
// admission, and opens it again when units come back. The ticks of one
// sale must not run concurrently (Run makes them one after the other).
func (a *Admitter) Tick(ctx context.Context, s Sale, now time.Time) (State, error) {
	a.mu.Lock()
	p := a.sales[s.ID]
	if p == nil {
		p = &pace{last: now, remaining: -1}
		a.sales[s.ID] = p
	}
	a.mu.Unlock()

	// A late tick does not catch up on the time it missed beyond two
	// ticks: the jitter of the ticks is made good (a tick 30 ms late and
	// the next 30 ms early admit two ticks' worth), a pause (a loaded
	// machine, a new leader) is not, so that the grab path never sees a
	// burst after it: in any second the room admits at most rate x (1 s +
	// two ticks), and about rate x 1 s while the ticks keep time. The rate
	// is a ceiling, not a quota.
	dt := min(now.Sub(p.last), 2*a.tick).Seconds()
	p.last = now
	allow := p.carry + float64(max(s.Rate, 1))*max(dt, 0)
	n := int64(math.Floor(allow))
	remaining, err := a.stock.Remaining(ctx, s.ID)
	if err != nil {
		return State{}, fmt.Errorf("queue: the stock of sale %d: %w", s.ID, err)
	}
	closed := remaining <= 0
	if p.remaining >= 0 && remaining < p.remaining {
		// units bought (a unit that came back in the same tick hides one:
		// the count errs on the side of admitting fewer)
		p.bought += p.remaining - remaining
	}
	p.remaining = remaining
	if s.Hold > 0 {
		// admitted but not bought within the hold window: those admitted
		// since the oldest sample, less the units bought since
		var outstanding int64
		if len(p.samples) > 0 {
			old, last := p.samples[0], p.samples[len(p.samples)-1]
			outstanding = max((last.admitted-old.admitted)-(p.bought-old.bought), 0)
		}
		n = min(n, max(int64(s.Hold)*remaining-outstanding, 0))
	}
	closedArg := "0"
	if closed {
		closedArg, n = "1", 0
	}
	v, err := a.admit.Run(ctx, a.room.rdb, a.room.keys(s.ID), n, closedArg, s.StartsAt.UnixMilli(), expiry(s)).Slice()
	if err != nil {
		return State{}, fmt.Errorf("queue: admit in sale %d: %w", s.ID, err)
	}
	st, prev, err := parseAdmitted(v)
	if err != nil {
		return State{}, err
	}
	st.Closed = closed
	if st.Draw < 0 {
		p.carry = 0 // before the start: nothing to admit
		return st, nil
	}
	if moved := st.Admitted - prev; moved < n || closed {
		p.carry = 0 // nobody left to admit: an allowance is not saved up
	} else {
		p.carry = allow - float64(n)
	}
	p.samples = append(p.samples, sample{at: now, admitted: st.Admitted, bought: p.bought})
	cut := 0
	for cut < len(p.samples)-1 && now.Sub(p.samples[cut].at) > a.room.cfg.HoldWindow {
		cut++
	}
	p.samples = p.samples[cut:]
	return st, nil
}

// parseAdmitted reads admit.lua's reply {a, th, p, a before}; prev is what
// was admitted before the tick.
func parseAdmitted(v []any) (st State, prev int64, err error) {
	if len(v) != 4 {
		return State{}, 0, errors.New("queue: admit.lua: unexpected reply")
	}
	num := func(x any) int64 {
		switch x := x.(type) {
		case int64:
			return x
		case string:
			n, _ := strconv.ParseInt(x, 10, 64)
			return n
		}
		return 0
	}
	th, _ := v[1].(string)
	return State{Admitted: num(v[0]), Draw: num(v[2]), Th: parseTh(th)}, num(v[3]), nil
}

// Run leads the admission of the rooms of sales() (called every tick: the
// sales with a waiting room that have not ended) while it holds the lock
// "queue:admitter" of locks, and waits for it while another process does,
// until ctx ends.
func (a *Admitter) Run(ctx context.Context, locks *lock.Client, sales func() []Sale) error {
	for ctx.Err() == nil {
		l, err := locks.Lock(ctx, "queue:admitter")
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			a.room.cfg.Log.Warn("waiting room: cannot take the admitter's lock", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		// lead until the lock is lost or ctx ends
		lctx, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(l.Context(), cancel)
		a.lead(lctx, sales)
		stop()
		cancel()
		_ = l.Unlock(context.WithoutCancel(ctx))
	}
	return ctx.Err()
}

// tickParallel bounds the sales TickAll ticks at once: each tick is two
// Redis round trips, and a round of many live sales one after the other
// would outlast the tick.
const tickParallel = 16

// TickAll ticks each of sales (distinct sales), up to tickParallel at
// once, and returns each tick's error.
func (a *Admitter) TickAll(ctx context.Context, sales []Sale) []error {
	errs := make([]error, len(sales))
	sem := make(chan struct{}, tickParallel)
	var wg sync.WaitGroup
	for i, s := range sales {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			_, errs[i] = a.Tick(ctx, s, time.Now())
		})
	}
	wg.Wait()
	return errs
}

// lead admits every tick until ctx (the lock's) ends.
func (a *Admitter) lead(ctx context.Context, sales func() []Sale) {
	t := time.NewTicker(a.tick)
	defer t.Stop()
	failing := map[int64]bool{} // warned once, until a tick succeeds
	for {
		live := map[int64]bool{}
		ss := sales()
		errs := a.TickAll(ctx, ss)
		for i, s := range ss {
			live[s.ID] = true
			switch err := errs[i]; {
			case err != nil && ctx.Err() == nil && !failing[s.ID]:
				a.room.cfg.Log.Warn("waiting room: admission tick failed; trying every tick", "activity", s.ID, "err", err)
				failing[s.ID] = true
			case err == nil && failing[s.ID]:
				a.room.cfg.Log.Info("waiting room: admitting again", "activity", s.ID)
				delete(failing, s.ID)
			}
		}
		a.mu.Lock()
		for id := range a.sales {
			if !live[id] { // ended: its pace is of no more use
				delete(a.sales, id)
				delete(failing, id)
			}
		}
		a.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
