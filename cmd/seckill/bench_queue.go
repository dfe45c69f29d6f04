package main

import (
	"fmt"
	"io"
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

// The goals of a run through the waiting room (issue 27): the grabs a
// second stay within 10% of the admission rate, an admitted buyer's grab
// answers within 10 ms at the 99th percentile, the room admits in arrival
// order, and no one waits on after the sell-out.
const (
	queueRateSlack = 1.10
	queueGrabP99   = 10 * time.Millisecond
	queueTau       = 0.99
)

// writeVerdict prints the run's figures next to the room's goals.
func (q *benchQueue) writeVerdict(w io.Writer, rep *loadgen.Report) {
	qr := rep.Queue
	ok := func(b bool) string {
		if b {
			return "ok"
		}
		return "SHORT"
	}
	fmt.Fprintf(w, "\ngoals of the waiting room (admission rate %d/s):\n", q.rate)
	fmt.Fprintf(w, "  grabs a second, peak %d = %.2fx the rate (<= %.2fx): %s\n", qr.GrabsPeak,
		float64(qr.GrabsPeak)/float64(q.rate), queueRateSlack, ok(float64(qr.GrabsPeak) <= queueRateSlack*float64(q.rate)))
	fmt.Fprintf(w, "  admitted buyers' grab p99 %s (< %s): %s\n", rep.Latency.P99, queueGrabP99, ok(rep.Latency.P99 < queueGrabP99))
	if qr.Joined > qr.Drawn+1 {
		fmt.Fprintf(w, "  arrival order: Kendall tau %.4f (>= %.2f), %d out of order: %s\n", qr.KendallTau, queueTau, qr.OutOfOrder,
			ok(qr.KendallTau >= queueTau && qr.OutOfOrder == 0))
	}
	if qr.SoldOut > 0 {
		fmt.Fprintf(w, "  waiting answers more than 1s after the sell-out: %d: %s\n", qr.LateWaiting, ok(qr.LateWaiting == 0))
	}
}
