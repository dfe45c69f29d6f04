package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/loadgen"
)

// benchQueue runs the bench's crowd through the sale's waiting room: every
// user joins, polls when told, and grabs once admitted.
type benchQueue struct {
	rate     int           // --queue-rate: the room's admission rate; 0: no room
	hold     int           // --queue-hold
	joinRate float64       // --join-rate
	early    time.Duration // --queue-early
}

func (q *benchQueue) register(fs flagSet) {
	fs.IntVar(&q.rate, "queue-rate", 0, "put the sale behind a waiting room admitting this many buyers a second, and send the crowd through it: join, poll when told, grab with the pass (0: no room, every user grabs)")
	fs.IntVar(&q.hold, "queue-hold", 0, "with --queue-rate: also keep the buyers admitted and not yet bought at most this many for each unit left (0 to 100)")
	fs.Float64Var(&q.joinRate, "join-rate", 0, "with --queue-rate: users joining a second, in order (0: as fast as the connections go)")
	fs.DurationVar(&q.early, "queue-early", 0, "with --queue-rate: the first users join this long before the start, and are admitted in a random order drawn at the start")
}

func (q *benchQueue) check(c benchConfig, set map[string]bool) error {
	switch {
	case q.rate < 0 || q.rate > seckill.MaxQueueRate:
		return usagef("--queue-rate: %d is not between 0 and %d", q.rate, seckill.MaxQueueRate)
	case q.hold < 0 || q.hold > seckill.MaxQueueHold:
		return usagef("--queue-hold: %d is not between 0 and %d", q.hold, seckill.MaxQueueHold)
	case !(q.joinRate >= 0) || q.joinRate > 1e7:
		return usagef("--join-rate: %v is not between 0 and 10000000", q.joinRate)
	case q.early < 0 || q.early > time.Hour:
		return usagef("--queue-early: %v is not between 0 and 1h", q.early)
	case q.rate == 0 && (set["queue-hold"] || set["join-rate"] || set["queue-early"]):
		return usagef("--queue-hold, --join-rate and --queue-early go with --queue-rate")
	case q.rate > 0 && (c.baseline || c.compare || c.drain.on):
		return usagef("--queue-rate runs the crowd through a waiting room: not with --baseline, --compare or --drain")
	case q.rate > 0 && c.target != "" && c.activity != 0:
		return usagef("--queue-rate creates a sale with a waiting room: not with --activity")
	case q.rate > 0 && (set["requests"] || set["repeat"]):
		return usagef("--requests and --repeat do not apply with --queue-rate: each user joins, and grabs once admitted")
	}
	return nil
}

// room is the "queue" member of the sale the bench creates ("": none).
func (q *benchQueue) room() string {
	if q.rate == 0 {
		return ""
	}
	return fmt.Sprintf(`{"rate":%d,"hold":%d}`, q.rate, q.hold)
}

// The goals of a run through the waiting room: the grabs a
// second stay within 10% of the admission rate, an admitted buyer's grab
// answers within 10 ms at the 99th percentile, the room admits in arrival
// order, and no one waits on after the sell-out.
const (
	queueRateSlack = 1.10
	queueGrabP99   = 10 * time.Millisecond
	queueTau       = 0.99
)

// writeVerdict prints the run's figures next to the room's goals; sv is
// the service's own series (nil: not read), whose grabs a second are the
// measure when there.
func (q *benchQueue) writeVerdict(w io.Writer, rep *loadgen.Report, sv *roomSeries) {
	qr := rep.Queue
	ok := func(b bool) string {
		if b {
			return "ok"
		}
		return "SHORT"
	}
	peak, by := qr.GrabsPeak, "sent by the crowd"
	if sv != nil {
		fmt.Fprintf(w, "the service, a second: admitted %v; grabs past the pass check %v\n", sv.Admitted, sv.Grabs)
		peak, by = slices.Max(sv.Grabs), "the service's"
	}
	fmt.Fprintf(w, "\ngoals of the waiting room (admission rate %d/s):\n", q.rate)
	fmt.Fprintf(w, "  grabs a second (%s), peak %d = %.2fx the rate (<= %.2fx): %s\n", by, peak,
		float64(peak)/float64(q.rate), queueRateSlack, ok(float64(peak) <= queueRateSlack*float64(q.rate)))
	fmt.Fprintf(w, "  admitted buyers' grab p99 %s (< %s): %s\n", rep.Latency.P99, queueGrabP99, ok(rep.Latency.P99 < queueGrabP99))
	if qr.Joined > qr.Drawn+1 {
		fmt.Fprintf(w, "  arrival order: Kendall tau %.4f (>= %.2f), %d out of order: %s\n", qr.KendallTau, queueTau, qr.OutOfOrder,
			ok(qr.KendallTau >= queueTau && qr.OutOfOrder == 0))
	}
	if qr.SoldOut > 0 {
		fmt.Fprintf(w, "  waiting answers more than 1s after the sell-out: %d: %s\n", qr.LateWaiting, ok(qr.LateWaiting == 0))
	}
}

// roomSeries is what the service said, second by second from the crowd's
// first join: the buyers its waiting room admitted (the room's
// seckill_queue_admitted_total), and the grabs it answered other than
// refusals for want of a valid pass (seckill_grabs_total): the grabs that
// went on to the sale.
type roomSeries struct {
	Admitted []int64 `json:"admitted_per_sec"`
	Grabs    []int64 `json:"grabs_per_sec"`
}

// watchRoom reads the service's /metrics every second from gate on, until
// the returned stop is called, which returns the series (nil if /metrics
// could not be read).
func watchRoom(ctx context.Context, base, token string, id int64, gate time.Time) (stop func() *roomSeries) {
	ctx, cancel := context.WithCancel(ctx)
	var (
		wg     sync.WaitGroup
		series roomSeries
		failed bool
	)
	wg.Go(func() {
		var lastA, lastG int64
		for i := 0; ; i++ {
			if sleepUntil(ctx, gate.Add(time.Duration(i)*time.Second)) != nil {
				return
			}
			a, g, err := readRoom(ctx, base, token, id)
			if err != nil {
				failed = ctx.Err() == nil
				return
			}
			if i > 0 {
				series.Admitted = append(series.Admitted, a-lastA)
				series.Grabs = append(series.Grabs, g-lastG)
			}
			lastA, lastG = a, g
		}
	})
	return func() *roomSeries {
		cancel()
		wg.Wait()
		if failed || len(series.Grabs) == 0 {
			return nil
		}
		return &series
	}
}

// readRoom reads sale id's admitted buyers, and all grabs answered but
// those refused for a pass, from the service's /metrics.
func readRoom(ctx context.Context, base, token string, id int64) (admitted, grabs int64, err error) {
	families, err := readMetrics(ctx, base, token)
	if err != nil {
		return 0, 0, err
	}
	admitted = int64(counterBy(families, "seckill_queue_admitted_total", "activity")[strconv.FormatInt(id, 10)])
	for outcome, n := range counterBy(families, "seckill_grabs_total", "outcome") {
		if !strings.HasPrefix(outcome, "pass_") {
			grabs += int64(n)
		}
	}
	return admitted, grabs, nil
}

func sleepUntil(ctx context.Context, t time.Time) error {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}
