// Package sqlstore holds what the SQL engines under store/ share: the plan
// that turns what the database holds into the outcomes and writes of a batch
// of order requests, the retry loop around a transaction, the embedded
// migration files, and small helpers for SQL with ? placeholders. The SQL
// itself stays in each engine's package.
package sqlstore

import (
	"cmp"
	"slices"
	"time"

	"github.com/seckilldev/seckill"
)

// MaxChunk bounds the lists that the lifecycle's statements take: orders
// expired, returns read or marked restocked at a time.
const MaxChunk = 500

// Key is a buyer in an activity: the pair the UNIQUE index of orders covers.
type Key struct{ ActivityID, UserID int64 }

// Facts is what the database holds about a chunk of requests, read inside the
// transaction after the rows of its activities were locked, so that nothing
// but this transaction can change it before commit.
type Facts struct {
	// Outcomes holds the outcome already recorded for an order id, in orders
	// (confirmed) or in order_failures.
	Outcomes map[int64]seckill.Outcome
	// Holders holds, for each buyer of the chunk who may not buy again,
	// the order that blocks them: a live one, or a returned one of an
	// activity without rebuy (the rows whose holder_user_id is set).
	Holders map[Key]int64
	// Remaining holds the remaining stock of each activity of the chunk that
	// exists; an activity that is absent has none.
	Remaining map[int64]int64
	// PayWithin holds the payment window of each activity of the chunk
	// that exists (0: no payment step).
	PayWithin map[int64]time.Duration
}

// NewFacts returns empty Facts ready to be filled, with room for the
// outcomes and holders of n requests, which Apply adds.
func NewFacts(n int) *Facts {
	return &Facts{
		Outcomes:  make(map[int64]seckill.Outcome, n),
		Holders:   make(map[Key]int64, n),
		Remaining: make(map[int64]int64),
		PayWithin: make(map[int64]time.Duration),
	}
}

// Failure is a row to insert into order_failures.
type Failure struct {
	Req             seckill.OrderRequest
	Reason          string
	ExistingOrderID int64 // 0 is stored as NULL
}

// Take is the stock a chunk takes from one activity.
type Take struct{ ActivityID, N int64 }

// Confirm is a row to insert into orders: a confirmed order.
type Confirm struct {
	seckill.OrderRequest
	// PayBy is the payment deadline: the confirmation time plus the
	// activity's payment window; zero (NULL) without a payment step.
	PayBy time.Time
}

// Plan is what a chunk of requests comes to: one outcome per request, in
// order, and the rows to write so that the database records them.
type Plan struct {
	Outcomes []seckill.Outcome
	Confirm  []Confirm // rows for orders, CreatedAt normalised
	Fail     []Failure // rows for order_failures, CreatedAt normalised
	Take     []Take    // sorted by ActivityID, N > 0
	// Unlocked is set on a plan made from facts read without the activity
	// locks (see Batcher.LockLate): the order ids of the chunk, of which
	// Recorded had a failure recorded.
	Unlocked []int64
	Recorded int
}

// Apply decides each request in order, as ApplyOrders documents: an order id
// with a recorded outcome keeps it; a buyer who holds another order fails
// with ReasonDuplicate; an activity without remaining stock (or that does not
// exist) gives ReasonSoldOut; any other request is confirmed and takes one
// unit of stock, with a payment deadline of now plus the activity's payment
// window (now is the confirmation time). Apply updates f as it goes, so a later request of the same
// chunk sees the earlier ones (the same order twice, a buyer twice).
func Apply(reqs []seckill.OrderRequest, f *Facts, now time.Time) Plan {
	p := Plan{Outcomes: make([]seckill.Outcome, len(reqs))}
	take := make(map[int64]int64)
	for i, r := range reqs {
		if o, ok := f.Outcomes[r.OrderID]; ok {
			p.Outcomes[i] = o
			continue
		}
		r.CreatedAt = CreatedAt(r.CreatedAt, now)
		key := Key{r.ActivityID, r.UserID}
		var o seckill.Outcome
		if existing, ok := f.Holders[key]; ok {
			o = seckill.Outcome{Status: seckill.OrderFailed, Reason: seckill.ReasonDuplicate, ExistingOrderID: existing}
			p.Fail = append(p.Fail, Failure{Req: r, Reason: o.Reason, ExistingOrderID: existing})
		} else if f.Remaining[r.ActivityID] > 0 {
			o = seckill.Outcome{Status: seckill.OrderConfirmed}
			f.Remaining[r.ActivityID]--
			f.Holders[key] = r.OrderID
			take[r.ActivityID]++
			p.Confirm = append(p.Confirm, Confirm{OrderRequest: r, PayBy: PayBy(now, f.PayWithin[r.ActivityID])})
		} else {
			o = seckill.Outcome{Status: seckill.OrderFailed, Reason: seckill.ReasonSoldOut}
			p.Fail = append(p.Fail, Failure{Req: r, Reason: o.Reason})
		}
		f.Outcomes[r.OrderID] = o
		p.Outcomes[i] = o
	}
	for id, n := range take {
		p.Take = append(p.Take, Take{ActivityID: id, N: n})
	}
	slices.SortFunc(p.Take, func(a, b Take) int { return cmp.Compare(a.ActivityID, b.ActivityID) })
	p.sortRows()
	return p
}

// sortRows orders the rows to insert by order id, so that two transactions
// inserting the same ids (which no activity lock keeps apart, e.g. failures
// for an activity that does not exist) take the index locks in the same
// order and wait for each other instead of deadlocking.
func (p *Plan) sortRows() {
	slices.SortFunc(p.Confirm, func(a, b Confirm) int { return cmp.Compare(a.OrderID, b.OrderID) })
	slices.SortFunc(p.Fail, func(a, b Failure) int { return cmp.Compare(a.Req.OrderID, b.Req.OrderID) })
}

// Fail records each request without an outcome as failed with reason, as
// FailOrders documents. Only f.Outcomes is used (and updated).
func Fail(reqs []seckill.OrderRequest, reason string, f *Facts, now time.Time) Plan {
	p := Plan{Outcomes: make([]seckill.Outcome, len(reqs))}
	for i, r := range reqs {
		o, ok := f.Outcomes[r.OrderID]
		if !ok {
			r.CreatedAt = CreatedAt(r.CreatedAt, now)
			o = seckill.Outcome{Status: seckill.OrderFailed, Reason: reason}
			p.Fail = append(p.Fail, Failure{Req: r, Reason: reason})
			f.Outcomes[r.OrderID] = o
		}
		p.Outcomes[i] = o
	}
	p.sortRows()
	return p
}

// ValidReason reports whether reason fits order_failures.reason.
func ValidReason(reason string) error {
	if reason == "" || len(reason) > 32 {
		return seckill.Errorf(seckill.EINVALID, "failure reason must be 1 to 32 bytes, got %q", reason)
	}
	return nil
}

// Millis is t in UTC truncated to the millisecond: what every engine stores.
// Truncating in Go keeps the engines alike (PostgreSQL and MySQL round,
// MariaDB truncates).
func Millis(t time.Time) time.Time { return t.UTC().Truncate(time.Millisecond) }

// CeilMillis is t in UTC rounded up to the millisecond: for a column at
// millisecond precision, col >= t holds exactly when col >= CeilMillis(t).
func CeilMillis(t time.Time) time.Time {
	return t.UTC().Add(time.Millisecond - 1).Truncate(time.Millisecond)
}

// PayBy is the payment deadline of an order confirmed at now in an activity
// whose payment window is within: zero if it has none.
func PayBy(now time.Time, within time.Duration) time.Time {
	if within <= 0 {
		return time.Time{}
	}
	return Millis(now.Add(within))
}

// CreatedAt is the stored created_at of a request: its own, or now if unset.
func CreatedAt(t, now time.Time) time.Time {
	if t.IsZero() {
		t = now
	}
	return Millis(t)
}

// OrderIDs returns the distinct order ids of reqs.
func OrderIDs(reqs []seckill.OrderRequest) []int64 {
	return distinct(reqs, func(r seckill.OrderRequest) int64 { return r.OrderID })
}

// ActivityIDs returns the distinct activity ids of reqs in ascending order:
// the order in which engines lock activity rows, so that two transactions
// never wait for each other in a cycle.
func ActivityIDs(reqs []seckill.OrderRequest) []int64 {
	ids := distinct(reqs, func(r seckill.OrderRequest) int64 { return r.ActivityID })
	slices.Sort(ids)
	return ids
}

// Users returns the distinct user ids of reqs in the activity.
func Users(reqs []seckill.OrderRequest, activityID int64) []int64 {
	var users []int64
	seen := make(map[int64]bool)
	for _, r := range reqs {
		if r.ActivityID == activityID && !seen[r.UserID] {
			seen[r.UserID] = true
			users = append(users, r.UserID)
		}
	}
	return users
}

func distinct(reqs []seckill.OrderRequest, id func(seckill.OrderRequest) int64) []int64 {
	ids := make([]int64, 0, len(reqs))
	seen := make(map[int64]bool, len(reqs))
	for _, r := range reqs {
		if v := id(r); !seen[v] {
			seen[v] = true
			ids = append(ids, v)
		}
	}
	return ids
}
