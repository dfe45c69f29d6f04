package stock

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Borrowing. A bucket that runs out while others hold stock takes units
// from the fullest of them, on demand, in a transfer of two scripts on two
// slots: xfer_out.lua takes the units out of the sender and writes the
// transfer in its journal; xfer_in.lua credits them to the receiver, once
// (its credit set is the receipt), and the journal entry is then deleted.
// A transfer whose process died halfway stays in the journal, and the
// next borrow that reads it completes it (recoverJournals). A unit is
// always in exactly one place: a bucket's stock, a journal, or an order,
// so no transfer can oversell; and the buyer marks never move (a user's
// grabs all run in their home bucket), so none can double-sell.
//
// Sold out is proved, not guessed. Each bucket counts the units it ever
// sent (out) and received (in). Q = sum over buckets of stock - debt + out
// - in changes only with grabs (down) and returns (up): a transfer's two
// halves each leave their bucket's stock + out - in as it was. level.lua
// reads one bucket atomically; reading every bucket, one after another,
// yields the true Q at some instant of the reads, minus the grabs that ran
// meanwhile, whatever transfers ran between the reads. So Q read <= 0 means
// that no unit was left anywhere, in a bucket or in flight, at the end of
// the reads: the verdict is kept for verdictFor (see bucket.go).

var (
	//go:embed scripts/level.lua
	levelSrc string
	//go:embed scripts/xfer_out.lua
	xferOutSrc string
	//go:embed scripts/xfer_in.lua
	xferInSrc string
	//go:embed scripts/journal.lua
	journalSrc string

	levelScript   = redis.NewScript(levelSrc)
	xferOutScript = redis.NewScript(xferOutSrc)
	xferInScript  = redis.NewScript(xferInSrc)
	journalScript = redis.NewScript(journalSrc)
)

const (
	// borrowRounds bounds how often one batch's short grabs borrow and go
	// again: each borrow moves at least one unit, and a batch is at most
	// MaxBatch grabs; a crowd of other buckets taking the units as fast can
	// exhaust it, and the grabs are then told sold out.
	borrowRounds = 8
	// scanRounds bounds the reads of every bucket one borrow makes when
	// what it reads does not settle (a donor emptied meanwhile, units in
	// flight).
	scanRounds = 4
)

// BorrowStats counts what an engine's borrowing did since it started.
type BorrowStats struct {
	// Transfers moved Units between buckets.
	Transfers, Units int64
	// Recovered counts the transfers that a borrow completed for another
	// (its process died, or failed, halfway).
	Recovered int64
	// Proven counts the sold-out verdicts, each proved by reading every
	// bucket; Unproven the short grabs told sold out without such a proof
	// because the units kept moving away (see borrowRounds and
	// scanRounds): perhaps wrongly.
	Proven, Unproven int64
}

// borrowStats is BorrowStats, counted atomically.
type borrowStats struct {
	transfers, units, recovered, proven, unproven atomic.Int64
}

// BorrowStats returns what the engine's borrowing did since it started.
func (e *Engine) BorrowStats() BorrowStats {
	b := &e.borrows
	return BorrowStats{Transfers: b.transfers.Load(), Units: b.units.Load(), Recovered: b.recovered.Load(),
		Proven: b.proven.Load(), Unproven: b.unproven.Load()}
}

// level is one bucket's units (level.lua), and its epoch.
type level struct {
	loaded                        bool
	stock, debt, out, in, journal int64
	epoch                         string
}

// borrow gets units into bucket to of s, which ran out with need grabs
// short: from the fullest other bucket, half its stock or need, whichever
// is more (all of it if that is less), then from the next fullest while
// fewer than need came. It returns nil once bucket to may
// hold units (the grabs go again), ErrSoldOut when every bucket is proved
// empty, ErrNotLoaded if a bucket is not loaded, and an ErrUnavailable
// error if Redis did not answer. The short grabs hold no order in any of
// these cases: their bucket's script answered them sold out.
func (e *Engine) borrow(ctx context.Context, s *shards, to, need int) error {
	for range scanRounds {
		if s.soldOut(time.Now()) {
			return ErrSoldOut
		}
		lv, err := e.levels(ctx, s)
		if err != nil {
			return unavailable("read the buckets", err)
		}
		var journals int64
		var donors []int
		for b, l := range lv {
			if !l.loaded {
				return ErrNotLoaded
			}
			if l.journal > 0 {
				journals++
			}
			if b != to && l.stock > 0 {
				donors = append(donors, b)
			}
		}
		slices.SortFunc(donors, func(x, y int) int { return cmp.Compare(lv[y].stock, lv[x].stock) })
		switch {
		case lv[to].stock > 0:
			return nil // credited meanwhile, or given back
		case len(donors) > 0:
			want, moved := int64(need), int64(0)
			for _, d := range donors {
				have := lv[d].stock
				n, err := e.transfer(ctx, s, d, to, min(have, max(want, (have+1)/2)))
				if err != nil {
					if moved > 0 {
						return nil
					}
					return unavailable("transfer units", err)
				}
				if moved += n; moved >= int64(need) {
					break
				}
				want = int64(need) - moved
			}
			if moved > 0 {
				return nil
			}
		case journals > 0:
			if err := e.recoverJournals(ctx, s, lv); err != nil {
				return unavailable("complete transfers", err)
			}
		case units(lv) <= 0:
			s.soldOutTill.Store(time.Now().Add(verdictFor).UnixNano())
			e.borrows.proven.Add(1)
			return ErrSoldOut
		}
		// Otherwise Q > 0 with no unit in sight: a transfer was credited
		// to a bucket read before the credit; the next read finds it.
	}
	e.borrows.unproven.Add(int64(need))
	return ErrSoldOut
}

// units returns Q (see above) of what levels read: at most the units
// left at the end of the reads.
func units(lv []level) int64 {
	var q int64
	for _, l := range lv {
		q += l.stock - l.debt + l.out - l.in
	}
	return q
}

func unavailable(what string, err error) error {
	return &grabError{outcome: ErrUnavailable, err: fmt.Errorf("%s: %w", what, err)}
}

// levels reads every bucket of s (level.lua), pipelined: one round trip
// per node.
func (e *Engine) levels(ctx context.Context, s *shards) ([]level, error) {
	cmds, err := e.runEach(ctx, levelScript, len(s.keys), func(b int) []string {
		k := s.keys[b]
		return []string{k.Meta, k.Debt, k.Journal}
	})
	if err != nil {
		return nil, err
	}
	out := make([]level, len(cmds))
	for b, c := range cmds {
		v, _ := c.Val().([]any)
		var n [6]int64
		ok := len(v) == 7
		for i := 0; ok && i < 6; i++ {
			n[i], ok = v[i].(int64)
		}
		epoch, isStr := "", false
		if ok {
			epoch, isStr = v[6].(string)
		}
		if !ok || !isStr {
			return nil, fmt.Errorf("stock: level of bucket %d of activity %d: unexpected reply %v", b, s.id, c.Val())
		}
		out[b] = level{n[0] == 1, n[1], n[2], n[3], n[4], n[5], epoch}
	}
	return out, nil
}

// runEach runs script sc n times in one pipeline, call i on keys(i),
// sending EVAL for the calls whose server did not hold the script.
func (e *Engine) runEach(ctx context.Context, sc *redis.Script, n int, keys func(int) []string) ([]*redis.Cmd, error) {
	cmds := make([]*redis.Cmd, n)
	pipe := e.rdb.Pipeline()
	for i := range n {
		cmds[i] = sc.EvalSha(ctx, pipe, keys(i))
	}
	_, _ = pipe.Exec(ctx)
	for i, c := range cmds {
		if redis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
			cmds[i] = sc.Run(ctx, e.rdb, keys(i))
		}
		if err := cmds[i].Err(); err != nil {
			return nil, err
		}
	}
	return cmds, nil
}

// transfer moves up to k units from bucket from of s to bucket to, and
// returns how many it moved (0: from had none left).
func (e *Engine) transfer(ctx context.Context, s *shards, from, to int, k int64) (int64, error) {
	src := s.keys[from]
	id := strconv.FormatUint(rand.Uint64(), 36)
	n, err := e.runAcked(ctx, xferOutScript, []string{src.Meta, src.Journal}, k, id, to)
	if err != nil {
		// With AckReplicas, the transfer may be in the sender's journal
		// and not on its replicas: it is left to recoverJournals, which
		// completes only what the replicas confirm.
		return 0, err
	}
	switch v, _ := n.(int64); {
	case v == -1:
		return 0, ErrNotLoaded
	case v <= 0:
		return 0, nil
	default:
		if err := e.credit(ctx, s, from, to, id, v); err != nil {
			return 0, err
		}
		e.borrows.transfers.Add(1)
		e.borrows.units.Add(v)
		return v, nil
	}
}

// credit completes transfer id of k units from bucket from to bucket to:
// the credit (once), then the journal entry's deletion. An error leaves
// the entry for recoverJournals.
func (e *Engine) credit(ctx context.Context, s *shards, from, to int, id string, k int64) error {
	dst := s.keys[to]
	n, err := xferInScript.Run(ctx, e.rdb, []string{dst.Meta, dst.Debt, dst.Credits}, id, k).Int()
	switch {
	case err != nil:
		return err
	case n < 0:
		return ErrNotLoaded
	}
	return e.rdb.HDel(ctx, s.keys[from].Journal, id).Err()
}

// recoverJournals completes the transfers in the journals of the buckets
// that lv shows holding some (see journal.lua).
func (e *Engine) recoverJournals(ctx context.Context, s *shards, lv []level) error {
	var errs []error
	for b, l := range lv {
		if l.journal == 0 {
			continue
		}
		reply, err := e.runAcked(ctx, journalScript, []string{s.keys[b].Journal})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		kv, _ := reply.([]any)
		for i := 0; i+1 < len(kv); i += 2 {
			id, _ := kv[i].(string)
			entry, _ := kv[i+1].(string)
			to, k, err := parseTransfer(entry, len(s.keys))
			if err != nil {
				errs = append(errs, fmt.Errorf("stock: journal of bucket %d of activity %d: %w", b, s.id, err))
				continue
			}
			if err := e.credit(ctx, s, b, to, id, k); err != nil {
				errs = append(errs, err)
			} else {
				e.borrows.recovered.Add(1)
			}
		}
	}
	return errors.Join(errs...)
}

// parseTransfer reads a journal entry: "<receiving bucket>:<units>".
func parseTransfer(entry string, n int) (to int, k int64, err error) {
	a, b, ok := strings.Cut(entry, ":")
	to, err1 := strconv.Atoi(a)
	k, err2 := strconv.ParseInt(b, 10, 64)
	if !ok || err1 != nil || err2 != nil || to < 0 || to >= n || k <= 0 {
		return 0, 0, fmt.Errorf("bad transfer %q", entry)
	}
	return to, k, nil
}

// runAcked runs script sc on keys (all of one slot) as Script.Run does; with
// AckReplicas, WAIT follows on the connection of the master that ran it,
// and an error says that fewer replicas confirmed its writes.
func (e *Engine) runAcked(ctx context.Context, sc *redis.Script, keys []string, args ...any) (any, error) {
	if e.cfg.AckReplicas == 0 {
		return sc.Run(ctx, e.rdb, keys, args...).Result()
	}
	c, err := e.master(ctx, keys[0])
	if err != nil {
		return nil, err
	}
	for _, eval := range []bool{false, true} {
		pipe := c.Pipeline()
		var cmd *redis.Cmd
		if eval {
			cmd = sc.Eval(ctx, pipe, keys, args...)
		} else {
			cmd = sc.EvalSha(ctx, pipe, keys, args...)
		}
		wait := redis.NewIntCmd(ctx, "wait", e.cfg.AckReplicas, e.cfg.AckTimeout.Milliseconds())
		_ = pipe.Process(ctx, wait)
		_, _ = pipe.Exec(ctx)
		if err := cmd.Err(); err != nil {
			if !eval && redis.HasErrorPrefix(err, "NOSCRIPT") {
				continue
			}
			return nil, err
		}
		switch n, err := wait.Result(); {
		case err != nil:
			return nil, fmt.Errorf("WAIT: %w", err)
		case n < int64(e.cfg.AckReplicas):
			return nil, fmt.Errorf("%d of %d replicas confirmed within %s", n, e.cfg.AckReplicas, e.cfg.AckTimeout)
		}
		return cmd.Val(), nil
	}
	panic("unreachable")
}

// master returns the client of the master that holds key: the engine's
// own client, or on a Cluster the client of the key's master.
func (e *Engine) master(ctx context.Context, key string) (*redis.Client, error) {
	switch c := e.rdb.(type) {
	case *redis.Client:
		return c, nil
	case *redis.ClusterClient:
		return c.MasterForKey(ctx, key)
	}
	return nil, fmt.Errorf("AckReplicas needs a *redis.Client or *redis.ClusterClient, not %T", e.rdb)
}
