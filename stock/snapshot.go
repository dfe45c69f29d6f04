package stock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill"
)

// Snapshot is the complete buyer set of a sold-out activity, as Redis held
// it at one epoch (see load.lua). While Redis' stock is 0 the buyers change
// only through compensate.lua, reconcile.lua and return.lua, and all three
// move the epoch; so while the epoch stays and the stock stays 0, the
// snapshot stays true. An activity of several buckets has the epochs of
// all, and is sold out when they hold no unit, in stock or in flight
// (see borrow.go).
type Snapshot struct {
	ActivityID int64
	Epoch      string
	buyers     []buyer // by uid
	s          *shards
}

// buyer is 16 bytes a buyer: a million buyers take 16 MB.
type buyer struct{ uid, local int64 }

// Order returns the order of user uid, if uid is a buyer.
func (s *Snapshot) Order(uid int64) (int64, bool) {
	i, ok := slices.BinarySearchFunc(s.buyers, uid, func(b buyer, uid int64) int { return cmp.Compare(b.uid, uid) })
	if !ok {
		return 0, false
	}
	return seckill.OrderID(s.ActivityID, s.buyers[i].local), true
}

// Len returns the number of buyers.
func (s *Snapshot) Len() int { return len(s.buyers) }

var (
	// ErrNotSoldOut: Redis' stock of the activity is not 0.
	ErrNotSoldOut = errors.New("stock: activity not sold out")
	// ErrTooManyBuyers: the activity has more buyers than the snapshot's
	// limit.
	ErrTooManyBuyers = errors.New("stock: too many buyers for a snapshot")
)

// snapshotAttempts bounds the reads of a buyer set that keeps changing.
const snapshotAttempts = 3

// SoldOutSnapshot reads the buyers of a sold-out activity: ErrNotSoldOut if
// Redis has stock left, ErrTooManyBuyers above limit buyers, ErrNotLoaded.
// A large set is read in chunks (HSCAN), so Redis never blocks on it; the
// epoch and the stock, read before and after, prove that nothing changed
// meanwhile (else it reads again, a few times).
func (e *Engine) SoldOutSnapshot(ctx context.Context, a seckill.Activity, limit int) (*Snapshot, error) {
	activityID := a.ID
	sh := e.layout(&a)
	for range snapshotAttempts {
		epoch, err := e.soldOutEpoch(ctx, sh)
		if err != nil {
			return nil, err
		}
		counts := make([]*redis.IntCmd, len(sh.keys))
		pipe := e.rdb.Pipeline()
		for b, k := range sh.keys {
			counts[b] = pipe.HLen(ctx, k.Buyers)
		}
		_, _ = pipe.Exec(ctx)
		var n int64
		for _, c := range counts {
			m, err := c.Result()
			if err != nil {
				return nil, err
			}
			n += m
		}
		if n > int64(limit) {
			return nil, ErrTooManyBuyers
		}
		buyers := make([]buyer, 0, n)
		add := func(kv []string) error {
			for i := 0; i+1 < len(kv); i += 2 {
				uid, err1 := strconv.ParseInt(kv[i], 10, 64)
				local, err2 := strconv.ParseInt(kv[i+1], 10, 64)
				if err1 != nil || err2 != nil {
					return fmt.Errorf("stock: bad buyer %q -> %q of activity %d", kv[i], kv[i+1], activityID)
				}
				buyers = append(buyers, buyer{uid, local})
			}
			return nil
		}
		if err := e.readBuyers(ctx, sh, counts, add, limit, func() int { return len(buyers) }); err != nil {
			return nil, err
		}
		again, err := e.soldOutEpoch(ctx, sh)
		if errors.Is(err, ErrNotSoldOut) || err == nil && again != epoch {
			continue
		}
		if err != nil {
			return nil, err
		}
		slices.SortFunc(buyers, func(a, b buyer) int { return cmp.Compare(a.uid, b.uid) })
		buyers = slices.CompactFunc(buyers, func(a, b buyer) bool { return a.uid == b.uid })
		if len(buyers) > limit {
			return nil, ErrTooManyBuyers
		}
		if e.cfg.AckReplicas > 0 {
			// The snapshot answers its buyers with their orders: each
			// must be on the replicas, as a grab's answer is.
			for b := range sh.keys {
				if err := e.barrier(ctx, sh, b); err != nil {
					return nil, err
				}
			}
		}
		return &Snapshot{ActivityID: activityID, Epoch: epoch, buyers: slices.Clip(buyers), s: sh}, nil
	}
	return nil, fmt.Errorf("stock: the buyers of activity %d kept changing during %d reads", activityID, snapshotAttempts)
}

// readBuyers reads every bucket's buyers into add: a small hash at once,
// a large one in chunks (HSCAN), so that Redis never blocks on it. counts
// holds each bucket's HLEN; read tells how many buyers add got so far.
func (e *Engine) readBuyers(ctx context.Context, s *shards, counts []*redis.IntCmd, add func([]string) error, limit int, read func() int) error {
	const chunk = 1000
	for b, k := range s.keys {
		if counts[b].Val() <= chunk {
			kv, err := e.rdb.HGetAll(ctx, k.Buyers).Result()
			if err != nil {
				return err
			}
			for uid, local := range kv {
				if err := add([]string{uid, local}); err != nil {
					return err
				}
			}
			continue
		}
		var cursor uint64
		for {
			kv, next, err := e.rdb.HScan(ctx, k.Buyers, cursor, "", chunk).Result()
			if err != nil {
				return err
			}
			if err := add(kv); err != nil {
				return err
			}
			if cursor = next; cursor == 0 {
				break
			}
			if read() > limit+chunk {
				// HSCAN may repeat elements, but not that many: the set grew.
				return ErrTooManyBuyers
			}
		}
	}
	return nil
}

// SnapshotValid reports whether s still holds: the activity's epoch is the
// same and its stock still 0. One round trip.
func (e *Engine) SnapshotValid(ctx context.Context, s *Snapshot) (bool, error) {
	epoch, err := e.soldOutEpoch(ctx, s.s)
	switch {
	case errors.Is(err, ErrNotSoldOut), errors.Is(err, ErrNotLoaded):
		return false, nil
	case err != nil:
		return false, err
	}
	return epoch == s.Epoch, nil
}

// soldOutEpoch returns the activity's epoch if its stock is 0 (ErrNotSoldOut
// if not, ErrNotLoaded if Redis does not hold it), in one round trip. With
// several buckets, the epoch is every bucket's, and no unit may be left in
// any (stock or in flight: see borrow.go).
func (e *Engine) soldOutEpoch(ctx context.Context, s *shards) (string, error) {
	if len(s.keys) > 1 {
		lv, err := e.levels(ctx, s)
		if err != nil {
			return "", err
		}
		epochs := make([]string, len(lv))
		for b, l := range lv {
			switch {
			case !l.loaded:
				return "", ErrNotLoaded
			case l.stock > 0 || l.journal > 0:
				return "", ErrNotSoldOut
			}
			epochs[b] = l.epoch
		}
		if units(lv) > 0 {
			return "", ErrNotSoldOut
		}
		return strings.Join(epochs, ","), nil
	}
	v, err := e.rdb.HMGet(ctx, s.keys[0].Meta, "starts_ms", "epoch", MetaLeft).Result()
	if err != nil {
		return "", err
	}
	if len(v) != 3 || v[0] == nil || v[2] == nil {
		return "", ErrNotLoaded
	}
	left, _ := v[2].(string)
	n, err := strconv.ParseInt(left, 10, 64)
	if err != nil {
		return "", fmt.Errorf("stock: remaining stock %q: %w", left, err)
	}
	if n > 0 {
		return "", ErrNotSoldOut
	}
	// An activity loaded before epochs existed has none until the first
	// change: "" is its epoch, and the change makes it "1".
	epoch, _ := v[1].(string)
	return epoch, nil
}
