package loadgen

import (
	"bytes"
	"cmp"
	"container/heap"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/seckilldev/seckill/queue"
)

// Queue makes a run go through the activity's waiting room, as a buyer's
// page does: every user joins (answering the room's proof of work if it
// asks one), polls their status when the room says to ask again, and
// grabs once, with the pass, when admitted; a user told sold out or ended
// stops there. Users join in order (user FirstUserID first), JoinRate a
// second, the first Early before Config.StartAt (the sale's start).
//
// Each user has at most one request pending, in a schedule ordered by due
// time that the workers take from: the crowd can be far larger than the
// connections, most of it waiting between polls.
type Queue struct {
	// JoinRate is how many users join a second; 0: as fast as the workers go.
	JoinRate float64
	// Early is how long before Config.StartAt the first user joins: those
	// who join before the start are in the room's draw. 0: at the start.
	Early time.Duration
}

// QueueReport is what a run through the waiting room saw, beside the
// grabs that Report counts (only admitted users grab).
type QueueReport struct {
	// Joined users got a ticket; Drawn of them before the start.
	Joined int64 `json:"joined"`
	Drawn  int64 `json:"drawn"`
	// Polls is the number of status polls answered 200; PollsPerSec their
	// rate over the run; PollLatency their latency.
	Polls       int64   `json:"polls"`
	PollsPerSec float64 `json:"polls_per_sec"`
	PollLatency Latency `json:"poll_latency"`
	// Lag is how late the generator sent the requests after they were
	// due (the join's time, or the time the room said to ask again): a
	// lag of more than a few milliseconds means the figures are the
	// generator's, which fell behind, rather than the service's.
	Lag Latency `json:"lag"`
	// Errors counts joins and polls not answered 200 (transport errors,
	// timeouts, 5xx, 429): the user asks again a second later.
	Errors int64 `json:"errors"`
	// Admitted users were given a pass; SoldOut users were told sold out
	// while waiting, Ended users that the sale had ended; Waiting users
	// were still waiting when the run ended.
	Admitted int64 `json:"admitted"`
	SoldOut  int64 `json:"sold_out"`
	Ended    int64 `json:"ended"`
	Waiting  int64 `json:"waiting"`
	// GrabsPerSec counts the grabs sent in each second from the start of
	// the run (the first join): only admitted users grab, so these are
	// the requests that reach the grab script. GrabsPeak is the largest.
	GrabsPerSec []int64 `json:"grabs_per_sec"`
	GrabsPeak   int64   `json:"grabs_peak"`
	// KendallTau compares the order in which the users who joined after
	// the start sent their joins with the room's order of them (the
	// arrival numbers it gave): 1 is the same order. 0 with fewer than 2.
	KendallTau float64 `json:"kendall_tau"`
	// OutOfOrder counts users told "waiting" by a poll sent after someone
	// behind them in the room's order (a later arrival; for the draw, any
	// arrival) was told admitted: 0 when the room admits in its order.
	OutOfOrder int64 `json:"out_of_order"`
	// LateWaiting counts "waiting" answers to polls sent more than a
	// second after the last accepted grab, when the sale sold out (some
	// user was told sold out); LastWaiting is the latest such poll's
	// offset.
	LateWaiting int64         `json:"late_waiting"`
	LastWaiting time.Duration `json:"last_waiting_ns"`
}

// queueRun is the schedule and the per-user state of a run through the
// waiting room.
type queueRun struct {
	r     *run
	path  string
	mu    sync.Mutex
	due   eventHeap
	wake  chan struct{}
	work  chan int // user indexes whose request is due
	left  atomic.Int64
	done  chan struct{}
	users []queueUser

	polls, errors atomic.Int64
	grabs         []atomic.Int64 // by second from the gate
}

// queueUser is one user's walk through the room; only the worker that
// holds the user's due request touches it.
type queueUser struct {
	ticket    string
	challenge []string // the proof of work's headers, once solved
	arrival   int64    // the room's number of a user who joined after the start
	joined    bool
	sent      time.Duration // when the join was sent, from the gate
	admitted  time.Duration // first told admitted (the answer's arrival), +1; 0: never
	waiting   time.Duration // last told waiting (the poll's sending), +1
	state     string        // the last state told: waiting, admitted, sold_out, ended
	tries     int           // grabs sent
}

type eventHeap struct {
	at   []time.Duration // by user index
	keys []int
}

func (h *eventHeap) Len() int { return len(h.keys) }
func (h *eventHeap) Less(i, j int) bool {
	a, b := h.keys[i], h.keys[j]
	return h.at[a] < h.at[b] || h.at[a] == h.at[b] && a < b
}
func (h *eventHeap) Swap(i, j int) { h.keys[i], h.keys[j] = h.keys[j], h.keys[i] }
func (h *eventHeap) Push(x any)    { h.keys = append(h.keys, x.(int)) }
func (h *eventHeap) Pop() any {
	k := h.keys[len(h.keys)-1]
	h.keys = h.keys[:len(h.keys)-1]
	return k
}

func newQueueRun(r *run) *queueRun {
	cfg := r.cfg
	q := &queueRun{
		r:     r,
		path:  fmt.Sprintf("/api/v1/activities/%d/queue", cfg.ActivityID),
		wake:  make(chan struct{}, 1),
		work:  make(chan int, 4*cfg.Concurrency),
		done:  make(chan struct{}),
		users: make([]queueUser, cfg.Users),
		grabs: make([]atomic.Int64, int((cfg.Duration+cfg.Queue.Early)/time.Second)+2),
	}
	q.due.at = make([]time.Duration, cfg.Users)
	q.due.keys = make([]int, cfg.Users)
	for k := range q.users {
		if cfg.Queue.JoinRate > 0 {
			q.due.at[k] = time.Duration(float64(k) / cfg.Queue.JoinRate * float64(time.Second))
		}
		q.due.keys[k] = k
	}
	heap.Init(&q.due)
	q.left.Store(int64(cfg.Users))
	return q
}

// schedule makes user k's next request due at offset at.
func (q *queueRun) schedule(k int, at time.Duration) {
	q.mu.Lock()
	q.due.at[k] = at
	heap.Push(&q.due, k)
	first := q.due.keys[0] == k
	q.mu.Unlock()
	if first {
		select {
		case q.wake <- struct{}{}:
		default:
		}
	}
}

// finish counts user k out; the run ends with the last.
func (q *queueRun) finish() {
	if q.left.Add(-1) == 0 {
		close(q.done)
	}
}

// dispatch hands the due requests to the workers until every user is done
// or the run's time is up, then closes the work channel.
func (q *queueRun) dispatch() {
	r := q.r
	defer close(q.work)
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	var batch []int
	for {
		now := time.Since(r.start)
		if now >= r.stopAt {
			return
		}
		q.mu.Lock()
		batch = batch[:0]
		for q.due.Len() > 0 && q.due.at[q.due.keys[0]] <= now && len(batch) < 256 {
			batch = append(batch, heap.Pop(&q.due).(int))
		}
		wait := r.stopAt - now
		if q.due.Len() > 0 {
			wait = min(wait, q.due.at[q.due.keys[0]]-now)
		}
		q.mu.Unlock()
		for _, k := range batch {
			select {
			case q.work <- k:
			case <-q.done:
				return
			case <-r.ctx.Done():
				return
			}
		}
		if len(batch) > 0 {
			continue
		}
		t.Reset(max(wait, 0))
		select {
		case <-t.C:
		case <-q.wake:
		case <-q.done:
			return
		case <-r.ctx.Done():
			return
		}
	}
}

// loop runs the due requests of w's share of the crowd.
func (q *queueRun) loop(w *worker) {
	for k := range q.work {
		now := time.Since(q.r.start)
		if now >= q.r.stopAt || q.r.ctx.Err() != nil {
			return
		}
		_ = w.lag.RecordValue(min(max(int64((now-q.due.at[k])/time.Microsecond), 1), histMax))
		q.step(w, k)
	}
}

// retryLater is how long a user waits before asking again after an error.
const retryLater = time.Second

// step sends user k's due request: the join, or a poll (and, when the
// poll says admitted, the grab).
func (q *queueRun) step(w *worker, k int) {
	r := q.r
	u := &q.users[k]
	uid := r.cfg.userID(k)
	if !u.joined {
		q.join(w, k, u, uid)
		return
	}
	t0 := time.Now()
	sent := t0.Sub(r.start)
	status, n, err := w.cl.send("GET", q.path, uid, []string{"X-Queue-Ticket: " + u.ticket}, w.buf)
	now := time.Since(r.start)
	if err != nil || status != http.StatusOK {
		q.failed(w, status, n, err)
		q.schedule(k, now+retryLater)
		return
	}
	q.polls.Add(1)
	_ = w.qhist.RecordValue(min(max(int64(time.Since(t0)/time.Microsecond), 1), histMax))
	body := w.buf[:n]
	u.state = string(stringField(body, []byte(`"state"`)))
	switch u.state {
	case "waiting":
		// The send time: the answer was read from a state at least as
		// late as this (an admission answer's, below, from one no later
		// than its arrival).
		u.waiting = sent + 1
		after := time.Duration(intField(body, []byte(`"retry_after_ms"`))) * time.Millisecond
		q.schedule(k, now+max(after, 10*time.Millisecond))
	case "admitted":
		if u.admitted == 0 {
			u.admitted = now + 1
		}
		pass := string(stringField(body, []byte(`"pass"`)))
		if sec := int(time.Since(r.start) / time.Second); sec < len(q.grabs) {
			q.grabs[sec].Add(1)
		}
		u.tries++
		if out := w.grab(k, pass); !out.definite() && u.tries < 3 {
			// The buyer clicks again, as the page's Buy button allows.
			q.schedule(k, time.Since(r.start)+retryLater)
			return
		}
		q.finish()
	default: // sold_out, ended
		q.finish()
	}
}

func (q *queueRun) join(w *worker, k int, u *queueUser, uid int64) {
	r := q.r
	u.sent = time.Since(r.start)
	status, n, err := w.cl.send("POST", q.path, uid, u.challenge, w.buf)
	now := time.Since(r.start)
	body := w.buf[:n]
	switch {
	case err == nil && status == http.StatusOK:
		u.joined, u.ticket = true, string(stringField(body, []byte(`"ticket"`)))
		u.arrival = intField(body, []byte(`"arrival"`))
		q.schedule(k, now)
	case err == nil && status == http.StatusForbidden && bytes.Equal(stringField(body, keyCode), []byte(queue.EWORKREQUIRED)):
		// The room asks a proof of work: solve its challenge, join again.
		status, n, err = w.cl.send("GET", q.path+"/challenge", uid, nil, w.buf)
		if err != nil || status != http.StatusOK {
			q.failed(w, status, n, err)
			q.schedule(k, now+retryLater)
			return
		}
		c := string(stringField(w.buf[:n], []byte(`"challenge"`)))
		bits := int(intField(w.buf[:n], []byte(`"bits"`)))
		u.challenge = []string{"X-Queue-Challenge: " + c, "X-Queue-Nonce: " + queue.Solve(c, bits)}
		q.schedule(k, time.Since(r.start))
	case err == nil && status == http.StatusForbidden && bytes.Equal(stringField(body, keyCode), codeEnded):
		u.state = "ended"
		q.finish()
	default:
		q.failed(w, status, n, err)
		q.schedule(k, now+retryLater)
	}
}

// failed counts a join or poll not answered 200, and keeps a sample.
func (q *queueRun) failed(w *worker, status, n int, err error) {
	q.errors.Add(1)
	if err != nil {
		q.r.sample(func() string { return "queue: error: " + err.Error() })
	} else {
		q.r.sample(func() string { return fmt.Sprintf("queue: HTTP %d: %.200s", status, w.buf[:n]) })
	}
}

// intField returns the non-negative integer member named key (with its
// quotes) of a flat JSON object, 0 if absent.
func intField(body, key []byte) int64 {
	i := bytes.Index(body, key)
	if i < 0 {
		return 0
	}
	rest := skipSpace(body[i+len(key):])
	if len(rest) == 0 || rest[0] != ':' {
		return 0
	}
	rest = skipSpace(rest[1:])
	var n int64
	for _, c := range rest {
		if c < '0' || c > '9' || n > 1<<58 {
			break
		}
		n = n*10 + int64(c-'0')
	}
	return n
}

// report sums up the room's side of the run; rep holds the grabs'.
func (q *queueRun) report(rep *Report, elapsed time.Duration, workers []*worker) *QueueReport {
	h, lag := hdrhistogram.New(1, histMax, 3), hdrhistogram.New(1, histMax, 3)
	for _, w := range workers {
		h.Merge(w.qhist)
		lag.Merge(w.lag)
	}
	qr := &QueueReport{Polls: q.polls.Load(), Errors: q.errors.Load(), PollLatency: latencyOf(h), Lag: latencyOf(lag)}
	if elapsed > 0 {
		qr.PollsPerSec = float64(qr.Polls) / elapsed.Seconds()
	}
	last := len(q.grabs)
	for last > 0 && q.grabs[last-1].Load() == 0 {
		last--
	}
	qr.GrabsPerSec = make([]int64, last)
	for i := range qr.GrabsPerSec {
		qr.GrabsPerSec[i] = q.grabs[i].Load()
		qr.GrabsPeak = max(qr.GrabsPeak, qr.GrabsPerSec[i])
	}
	var sent, arrival []int64
	for i := range q.users {
		u := &q.users[i]
		if u.joined {
			qr.Joined++
			if u.arrival == 0 {
				qr.Drawn++
			} else {
				sent, arrival = append(sent, int64(u.sent)), append(arrival, u.arrival)
			}
		}
		switch {
		case u.admitted > 0: // whatever a retried grab's poll said after
			qr.Admitted++
		case u.state == "waiting":
			qr.Waiting++
		case u.state == "sold_out":
			qr.SoldOut++
		case u.state == "ended":
			qr.Ended++
		}
		if u.waiting > 0 {
			qr.LastWaiting = max(qr.LastWaiting, u.waiting-1)
		}
	}
	qr.KendallTau = kendallTau(sent, arrival)
	qr.OutOfOrder = q.outOfOrder()
	if qr.SoldOut > 0 && rep.Counts.Accepted > 0 {
		for i := range q.users {
			if w := q.users[i].waiting; w > 0 && w-1 > rep.LastAccepted+time.Second {
				qr.LateWaiting++
			}
		}
	}
	return qr
}

// outOfOrder counts the users told waiting after a user behind them in the
// room's order was told admitted. The room's order: the draw (arrival 0,
// in an order the client cannot see), then the arrivals by number.
func (q *queueRun) outOfOrder() int64 {
	idx := make([]int, 0, len(q.users))
	for i := range q.users {
		if q.users[i].joined {
			idx = append(idx, i)
		}
	}
	slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(q.users[a].arrival, q.users[b].arrival) })
	// From the back of the line: the earliest admission of anyone behind.
	var bad int64
	behind := time.Duration(1<<63 - 1)
	for j := len(idx) - 1; j >= 0; {
		g := j
		for g >= 0 && q.users[idx[g]].arrival == q.users[idx[j]].arrival {
			if w := q.users[idx[g]].waiting; w > 0 && w > behind {
				bad++
			}
			g--
		}
		for ; j > g; j-- {
			if a := q.users[idx[j]].admitted; a > 0 {
				behind = min(behind, a)
			}
		}
	}
	return bad
}

// kendallTau is Kendall's tau-a between xs and ys (pairs at the same
// index), counting the discordant pairs by merge sort: O(n log n).
func kendallTau(xs, ys []int64) float64 {
	n := len(xs)
	if n < 2 {
		return 0
	}
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return cmp.Or(cmp.Compare(xs[a], xs[b]), cmp.Compare(ys[a], ys[b])) })
	seq := make([]int64, n)
	for i, k := range idx {
		seq[i] = ys[k]
	}
	inv := inversions(seq, make([]int64, n))
	pairs := float64(n) * float64(n-1) / 2
	return 1 - 2*float64(inv)/pairs
}

// inversions counts the pairs i < j with s[i] > s[j], sorting s.
func inversions(s, tmp []int64) int64 {
	if len(s) < 2 {
		return 0
	}
	m := len(s) / 2
	inv := inversions(s[:m], tmp[:m]) + inversions(s[m:], tmp[m:])
	i, j, k := 0, m, 0
	for i < m && j < len(s) {
		if s[i] <= s[j] {
			tmp[k] = s[i]
			i++
		} else {
			tmp[k] = s[j]
			inv += int64(m - i)
			j++
		}
		k++
	}
	k += copy(tmp[k:], s[i:m])
	copy(tmp[k:], s[j:])
	copy(s, tmp[:len(s)])
	return inv
}

// WriteTable prints the room's side of the run after the grabs' table.
func (qr *QueueReport) WriteTable(w io.Writer) error {
	d := fmtDuration
	l := qr.PollLatency
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, s := range []string{
		fmt.Sprintf("waiting room\t%d joined (%d before the start), %d polls = %.0f/s, %d errors", qr.Joined, qr.Drawn, qr.Polls, qr.PollsPerSec, qr.Errors),
		fmt.Sprintf("  poll latency\tp50 %s  p99 %s  max %s", d(l.P50), d(l.P99), d(l.Max)),
		fmt.Sprintf("  generator lag\tp50 %s  p99 %s  max %s (requests sent late after their due time)", d(qr.Lag.P50), d(qr.Lag.P99), d(qr.Lag.Max)),
		fmt.Sprintf("  told\t%d admitted, %d sold out, %d ended, %d still waiting", qr.Admitted, qr.SoldOut, qr.Ended, qr.Waiting),
		fmt.Sprintf("  grabs a second\tpeak %d: %v", qr.GrabsPeak, qr.GrabsPerSec),
		fmt.Sprintf("  order\tKendall tau %.4f (arrivals), %d told waiting after someone behind was admitted", qr.KendallTau, qr.OutOfOrder),
		fmt.Sprintf("  sell-out notice\t%d waiting answers more than 1s after the last accepted grab; last waiting answer +%s", qr.LateWaiting, d(qr.LastWaiting)),
	} {
		fmt.Fprintln(tw, s)
	}
	return tw.Flush()
}

// latencyOf summarises a histogram of microseconds.
func latencyOf(h *hdrhistogram.Histogram) Latency {
	us := func(v int64) time.Duration { return time.Duration(v) * time.Microsecond }
	return Latency{
		Count: h.TotalCount(),
		Mean:  time.Duration(h.Mean() * float64(time.Microsecond)),
		P50:   us(h.ValueAtQuantile(50)),
		P95:   us(h.ValueAtQuantile(95)),
		P99:   us(h.ValueAtQuantile(99)),
		P999:  us(h.ValueAtQuantile(99.9)),
		Max:   us(h.Max()),
	}
}
