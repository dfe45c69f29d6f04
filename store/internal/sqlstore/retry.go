package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/seckilldev/seckill"
)

// MaxAttempts is how often Retry runs a transaction before it gives up.
const MaxAttempts = 6

// ErrConflict reports that a write affected other rows than planned: another
// transaction got in between despite the locks (e.g. the same order id for
// another activity, or a failure recorded for an activity that does not exist
// and so has no row to lock). Rerunning the transaction reads what the other
// one wrote and decides again.
var ErrConflict = errors.New("concurrent write conflict")

// Retry runs tx until it succeeds, fails with an error that retryable rejects,
// ctx ends, or MaxAttempts runs are used up. It waits a short, jittered,
// growing time between runs. tx must be a whole transaction, safe to rerun.
func Retry(ctx context.Context, retryable func(error) bool, tx func() error) error {
	for attempt := 1; ; attempt++ {
		err := tx()
		if err == nil || !(errors.Is(err, ErrConflict) || retryable(err)) {
			return err
		}
		if attempt == MaxAttempts {
			return fmt.Errorf("gave up after %d attempts: %w", attempt, err)
		}
		wait := time.Duration(rand.Int64N(int64(time.Millisecond) << attempt))
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (retrying after: %v)", ctx.Err(), err)
		case <-time.After(wait):
		}
	}
}

// Planner decides the outcomes of a chunk of requests from its facts:
// Apply, or Fail bound to a reason.
type Planner func(reqs []seckill.OrderRequest, f *Facts, now time.Time) Plan

// Need says which facts a read gathers besides those it always reads: the
// chunk's activities (locked, unless Unlocked) and the outcomes recorded in
// order_failures.
type Need struct {
	Orders   bool // the outcomes recorded in orders
	Holders  bool // the orders that block the chunk's buyers (Facts.Holders)
	Unlocked bool // read the activities without locking them
}

// Op is what a batch does: its planner and the facts the planner needs.
type Op struct {
	Plan Planner
	Need Need
	// Optimistic: a chunk is first read without Need (see Batch).
	Optimistic bool
}

// ApplyOp is ApplyOrders' work.
var ApplyOp = Op{Plan: Apply, Need: Need{Orders: true, Holders: true}, Optimistic: true}

// FailOp is FailOrders' work: the requests without an outcome fail with
// reason. A failure row cannot meet a row of orders in a unique index, so
// its facts are always read.
func FailOp(reason string) Op {
	return Op{Plan: func(reqs []seckill.OrderRequest, f *Facts, now time.Time) Plan {
		return Fail(reqs, reason, f, now)
	}, Need: Need{Orders: true}}
}

// Batcher is what Batch needs of an engine, whose transactions are Tx.
type Batcher[Tx any] struct {
	// Chunk is the most requests read and written with one set of
	// statements. Chunks keep placeholder counts (MySQL: 65535, SQLite:
	// 32766) and statement sizes bounded without changing the outcomes.
	Chunk int
	// Retryable reports the errors after which the transaction is rerun.
	Retryable func(error) bool
	// InTx runs fn in a transaction, committed if fn returns nil.
	InTx func(fn func(Tx) error) error
	// Read locks the chunk's activities (unless need.Unlocked) and reads
	// the facts that need asks for.
	Read func(tx Tx, chunk []seckill.OrderRequest, need Need) (*Facts, error)
	// Write carries out a plan. A row that it meets in a unique index, and
	// a statement that affects other rows than planned, fail it with
	// ErrConflict. For a plan with Unlocked set, it inserts first, then
	// takes the stock, which locks the activities, then counts the
	// failures recorded for the Unlocked ids: Recorded, or ErrConflict.
	Write func(tx Tx, p Plan) error
	// LockLate: an optimistic chunk is read without the activity locks,
	// which the write takes last, so that the inserts of batches of one
	// activity (most of their work) run side by side, not one after the
	// other, and the lock is held only for the update of the stock and the
	// commit. Only where inserting a row that refers to an activity does
	// not conflict with the lock of a transaction that updates its stock
	// (PostgreSQL: FOR KEY SHARE and FOR NO KEY UPDATE; MySQL: sessions
	// that skip the foreign key checks, whose shared locks a later update
	// would deadlock on).
	LockLate bool
}

// Batch is the body every engine's ApplyOrders and FailOrders share: in one
// transaction, for each chunk of requests, read the facts, plan and write;
// the whole transaction is rerun (Retry) while its error is retryable. It
// returns the outcomes in request order.
//
// An optimistic op first reads a chunk without its Need: as if none of its
// orders were recorded in orders and none of its buyers held an order,
// which is so for every new order a worker writes. If the plan then
// writes no failure (every request is confirmed, or keeps the outcome
// recorded in order_failures), the facts left unread cannot change it, unless
// the database holds one of its orders or buyers after all: then an insert
// meets that row in a unique index (ErrConflict), and the transaction is
// rerun with every fact read, under the locks. A plan with any failure is
// made again from every fact at once, since a failure row meets nothing in
// orders. This saves the database two index probes per new order, of
// seven.
//
// With LockLate, the optimistic read takes no lock either, and so may see
// stock or failures that change before the write locks the activities:
// the write then takes only stock that is still there, and finds the same
// failures recorded (FailOrders locks the activities before it reads, and
// cannot see uncommitted orders), or the transaction is rerun under the
// locks. Any other change meets the inserts in a unique index.
func Batch[Tx any](ctx context.Context, b Batcher[Tx], reqs []seckill.OrderRequest, op Op) ([]seckill.Outcome, error) {
	out := make([]seckill.Outcome, 0, len(reqs))
	if len(reqs) == 0 {
		return out, nil
	}
	optimistic := op.Optimistic
	err := Retry(ctx, b.Retryable, func() error {
		out = out[:0]
		err := b.InTx(func(tx Tx) error {
			for chunk := range slices.Chunk(reqs, b.Chunk) {
				p, err := b.decide(tx, chunk, op, optimistic)
				if err != nil {
					return err
				}
				if err := b.Write(tx, p); err != nil {
					return err
				}
				out = append(out, p.Outcomes...)
			}
			return nil
		})
		if errors.Is(err, ErrConflict) {
			optimistic = false
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// decide reads a chunk's facts and plans it (see Batch for optimistic).
func (b Batcher[Tx]) decide(tx Tx, chunk []seckill.OrderRequest, op Op, optimistic bool) (Plan, error) {
	if optimistic {
		f, err := b.Read(tx, chunk, Need{Unlocked: b.LockLate})
		if err != nil {
			return Plan{}, err
		}
		recorded := len(f.Outcomes) // failures: Need.Orders is not set
		// The time of confirmation, once the activities are locked (or
		// their stock is read, with LockLate): payment deadlines count
		// from here.
		if p := op.Plan(chunk, f, time.Now()); len(p.Fail) == 0 {
			if b.LockLate {
				p.Unlocked, p.Recorded = OrderIDs(chunk), recorded
			}
			return p, nil
		}
	}
	f, err := b.Read(tx, chunk, op.Need)
	if err != nil {
		return Plan{}, err
	}
	return op.Plan(chunk, f, time.Now()), nil
}
