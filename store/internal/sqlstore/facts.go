package sqlstore

import (
	"context"
	"database/sql"
	"time"

	"github.com/seckilldev/seckill"
)

// SQLBatcher is the Batcher of an engine on database/sql, whose reads are
// ReadFacts.
func (d Dialect) SQLBatcher(ctx context.Context, chunk int, retryable func(error) bool,
	inTx func(context.Context, func(*sql.Tx) error) error, write func(context.Context, *sql.Tx, Plan) error) Batcher[*sql.Tx] {
	return Batcher[*sql.Tx]{
		Chunk:     chunk,
		Retryable: retryable,
		InTx:      func(fn func(*sql.Tx) error) error { return inTx(ctx, fn) },
		Read: func(tx *sql.Tx, chunk []seckill.OrderRequest, need Need) (*Facts, error) {
			return d.ReadFacts(ctx, tx, chunk, need)
		},
		Write: func(tx *sql.Tx, p Plan) error { return write(ctx, tx, p) },
	}
}

// ReadFacts locks the activities of reqs (unless need.Unlocked) and reads
// what the database holds about reqs, as much as need says: the read of the
// engines on database/sql (PostgreSQL pipelines its own). Each list is one
// IN list of placeholders, which the caller's chunks keep within the
// engine's limit.
func (d Dialect) ReadFacts(ctx context.Context, tx *sql.Tx, reqs []seckill.OrderRequest, need Need) (*Facts, error) {
	f := NewFacts()
	activities := ActivityIDs(reqs)

	qLock := `SELECT id, remaining, pay_within_ms FROM activities WHERE id IN (` + Params(len(activities)) + `) ORDER BY id`
	if !need.Unlocked {
		qLock += d.forUpdate
	}
	err := Query(ctx, tx, qLock, Args(activities), func(rows Row) error {
		var id, remaining, payMS int64
		if err := rows.Scan(&id, &remaining, &payMS); err != nil {
			return err
		}
		f.Remaining[id] = remaining
		f.PayWithin[id] = time.Duration(payMS) * time.Millisecond
		return nil
	})
	if err != nil {
		return nil, err
	}

	// An order in orders was confirmed: that is its outcome, whatever
	// happened to it since (paid, cancelled, expired).
	ids := Args(OrderIDs(reqs))
	in := Params(len(ids))
	qOutcomes := `SELECT order_id, 'failed', reason, COALESCE(existing_order_id, 0) FROM order_failures WHERE order_id IN (` + in + `)`
	args := ids
	if need.Orders {
		qOutcomes += ` UNION ALL SELECT id, 'confirmed', '', 0 FROM orders WHERE id IN (` + in + `)`
		args = append(args, ids...)
	}
	err = Query(ctx, tx, qOutcomes, args, func(rows Row) error {
		var id int64
		var o seckill.Outcome
		if err := rows.Scan(&id, &o.Status, &o.Reason, &o.ExistingOrderID); err != nil {
			return err
		}
		f.Outcomes[id] = o
		return nil
	})
	if err != nil || !need.Holders {
		return f, err
	}

	for _, a := range activities {
		users := Args(Users(reqs, a))
		qHolders := `SELECT holder_user_id, id FROM orders WHERE activity_id = ? AND holder_user_id IN (` + Params(len(users)) + `)`
		err := Query(ctx, tx, qHolders, append([]any{a}, users...), func(rows Row) error {
			var user, id int64
			if err := rows.Scan(&user, &id); err != nil {
				return err
			}
			f.Holders[Key{ActivityID: a, UserID: user}] = id
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return f, nil
}
