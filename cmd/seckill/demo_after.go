package main

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/seckilldev/seckill/check"
	"github.com/seckilldev/seckill/loadgen"
)

// afterReport is what happened after the sell-out, in `seckill demo`.
type afterReport struct {
	Winners *loadgen.SettleReport `json:"winners"`
	// Late is the late crowd: requests by status, and the units it bought
	// back (Resold) and paid.
	LateRequests int64                 `json:"late_requests"`
	Resold       int                   `json:"resold"`
	LateWinners  *loadgen.SettleReport `json:"late_winners"`
	// Oversell samples the checker's I1 (live + pending <= stock) once a
	// round while units come back and are sold again.
	Oversell struct {
		Samples, Violations int
	} `json:"oversell"`
}

// afterTheGrab plays the order's life after the sell-out: the winners pay,
// cancel or walk away (their orders expire after the payment window) while
// a late crowd keeps clicking, in rounds of a second; the units that come
// back are sold to it, and its winners pay at once. It ends once a round
// found nothing to buy after the walked-away orders have expired, their
// units are back in Redis and Redis has none left (status tells, from the
// checker). answers collects what every user was told.
func afterTheGrab(ctx context.Context, c demoConfig, base string, id int64, winners map[int64]int64,
	answers *check.Answers, identify func(*http.Request, int64), say func(string, ...any),
	status func(context.Context) (*check.Report, error)) (*afterReport, error) {
	say("after the sell-out: of %d winners, %.0f%% pay, %.0f%% cancel, the rest never pay (their orders expire after %s);"+
		" a late crowd keeps clicking for the units that come back",
		len(winners), c.payShare*100, c.cancelShare*100, c.payWithin)
	rep := &afterReport{LateWinners: &loadgen.SettleReport{Refused: map[string]int{}}}
	began := time.Now()
	settled := make(chan error, 1)
	go func() {
		var err error
		rep.Winners, err = loadgen.Settle(ctx, loadgen.SettleConfig{URL: base, Winners: winners,
			PayShare: c.payShare, CancelShare: c.cancelShare, Identify: identify})
		settled <- err
	}()
	var winnersDone bool
	seen := map[int64]bool{} // order ids settled
	var lateSettles []chan *loadgen.SettleReport
	// The last unpaid order expires payWithin after it was confirmed (a
	// moment after began), and the expiry job acts within a second or two.
	expired := began.Add(c.payWithin + 3*time.Second)
	for round := 0; ; round++ {
		lr, err := loadgen.Run(ctx, loadgen.Config{URL: base, ActivityID: id, Users: c.users,
			FirstUserID: int64(c.users) + 1, Concurrency: 8, Rate: 200, Duration: time.Second, SkipWarmup: true, Token: c.token})
		if err != nil {
			return rep, fmt.Errorf("late crowd: %w", err)
		}
		rep.LateRequests += lr.Requests
		fresh := map[int64]int64{}
		for uid, oids := range lr.OrdersByUser() {
			answers.ByUser[uid] = mergeIDs(answers.ByUser[uid], oids)
			for _, oid := range oids {
				if !seen[oid] {
					seen[oid], fresh[uid] = true, oid
				}
			}
		}
		answers.Uncertain = append(answers.Uncertain, lr.UncertainUsers()...)
		if len(fresh) > 0 {
			rep.Resold += len(fresh)
			ch := make(chan *loadgen.SettleReport, 1)
			lateSettles = append(lateSettles, ch)
			go func() {
				r, _ := loadgen.Settle(ctx, loadgen.SettleConfig{URL: base, Winners: fresh, PayShare: 1, Identify: identify})
				ch <- r
			}()
		}
		if !winnersDone {
			select {
			case err := <-settled:
				if err != nil {
					return rep, fmt.Errorf("winners: %w", err)
				}
				winnersDone = true
				say("winners: %d paid, %d cancelled, %d walked away; every double click got one answer: %t",
					rep.Winners.Paid, rep.Winners.Cancelled, rep.Winners.Unpaid, rep.Winners.Unequal == 0)
			default:
			}
		}
		// The checker, while the sale goes on: no moment may see more
		// units held (paid, confirmed, pending) than the stock.
		st, err := status(ctx)
		if err != nil {
			return rep, fmt.Errorf("late crowd: %w", err)
		}
		rep.Oversell.Samples++
		if r, ok := st.Result(check.NoOversell); ok && !r.Held {
			rep.Oversell.Violations++
			say("the checker sees an oversell while units come back: %s", r.Detail)
		}
		// On a loaded machine the expiry job may act later than the
		// grace above, and a unit may be on its way back to Redis.
		if winnersDone && time.Now().After(expired) && len(fresh) == 0 &&
			st.Expired >= int64(rep.Winners.Unpaid) && st.ReturnsPending == 0 && (st.RedisRemaining == nil || *st.RedisRemaining <= 0) {
			break
		}
		if time.Since(began) > c.payWithin+time.Minute {
			return rep, fmt.Errorf("late crowd: units still coming back after %s", time.Since(began).Round(time.Second))
		}
	}
	for _, ch := range lateSettles {
		r := <-ch
		if r == nil {
			continue
		}
		lw := rep.LateWinners
		lw.Paid += r.Paid
		lw.Unequal += r.Unequal
		lw.Errors += r.Errors
		for k, v := range r.Refused {
			lw.Refused[k] += v
		}
	}
	say("late crowd: %d requests; %d units sold again, %d paid; the checker's I1 sampled %d times meanwhile, %d oversold",
		rep.LateRequests, rep.Resold, rep.LateWinners.Paid, rep.Oversell.Samples, rep.Oversell.Violations)
	return rep, nil
}

// mergeIDs adds the ids of b missing from a.
func mergeIDs(a, b []int64) []int64 {
	for _, id := range b {
		if !slices.Contains(a, id) {
			a = append(a, id)
		}
	}
	return a
}

// winnersOf returns, for each user answered with an order, that order.
func winnersOf(byUser map[int64][]int64) map[int64]int64 {
	w := make(map[int64]int64, len(byUser))
	for uid, oids := range maps.All(byUser) {
		w[uid] = oids[0]
	}
	return w
}

// settled runs the checker once the returns of cancelled and expired
// orders have all reached Redis (the expiry job repairs any that a crash
// left behind), or after 10 seconds, whichever comes first.
func settled(ctx context.Context, cfg check.Config) (*check.Report, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := check.Run(ctx, cfg)
		if err != nil || res.ReturnsPending == 0 || time.Now().After(deadline) {
			return res, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
