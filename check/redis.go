package check

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/stock"
)

const streamGroup = stock.Group

// redisState is Redis's view of one activity.
type redisState struct {
	remaining   int64
	stockKnown  bool
	entries     int64
	groupExists bool
	undrained   map[int64]bool // (full) order ids whose stream entry is not acknowledged
}

// readRedis reads every bucket of the activity (see stock.BucketKeys). The
// units of transfers between buckets still in flight (a sender's journal)
// count as remaining: they are in neither bucket's stock.
func readRedis(ctx context.Context, rdb redis.UniversalClient, prefix string, id int64) (*redisState, error) {
	buckets, err := BucketsOf(ctx, rdb, prefix, id)
	if err != nil {
		return nil, err
	}
	rs := &redisState{undrained: map[int64]bool{}, stockKnown: true, groupExists: true}
	for b := range buckets {
		keys := stock.BucketKeys(prefix, id, buckets, b)
		v, err := rdb.HGet(ctx, keys.Meta, stock.MetaLeft).Int64()
		switch {
		case errors.Is(err, redis.Nil):
			rs.stockKnown = false
		case err != nil:
			return nil, fmt.Errorf("check: read %s %s: %w", keys.Meta, stock.MetaLeft, err)
		default:
			rs.remaining += v
		}
		if buckets > 1 {
			flight, err := rdb.HVals(ctx, keys.Journal).Result()
			if err != nil {
				return nil, fmt.Errorf("check: read %s: %w", keys.Journal, err)
			}
			for _, f := range flight {
				_, units, _ := strings.Cut(f, ":")
				n, _ := strconv.ParseInt(units, 10, 64)
				rs.remaining += n
			}
		}
		ss, err := streamStatus(ctx, rdb, keys.Orders)
		if err != nil {
			return nil, err
		}
		rs.groupExists = rs.groupExists && ss.GroupExists
		if err := rs.walk(ctx, rdb, id, keys.Orders, ss); err != nil {
			return nil, err
		}
	}
	if !rs.stockKnown {
		rs.remaining = 0
	}
	return rs, nil
}

// walk reads a whole order stream whose status is ss: an entry is
// undrained if it waits in the group's pending list or was never
// delivered.
func (rs *redisState) walk(ctx context.Context, rdb redis.UniversalClient, id int64, key string, ss Stream) error {
	pel := map[string]bool{}
	if ss.Pending > 0 {
		var err error
		if pel, err = pendingIDs(ctx, rdb, key); err != nil {
			return err
		}
	}
	start := "-"
	for {
		msgs, err := rdb.XRangeN(ctx, key, start, "+", 1000).Result()
		if err != nil {
			return fmt.Errorf("check: read stream %s: %w", key, err)
		}
		for _, m := range msgs {
			rs.entries++
			if pel[m.ID] || !ss.GroupExists || compareIDs(m.ID, ss.LastDeliveredID) > 0 {
				// The stream holds the order id's local part (see seckill.OrderID).
				local, _ := strconv.ParseInt(fmt.Sprint(m.Values["o"]), 10, 64)
				rs.undrained[seckill.OrderID(id, local)] = true
			}
		}
		if len(msgs) < 1000 {
			return nil
		}
		start = "(" + msgs[len(msgs)-1].ID
	}
}

// BucketsOf returns the number of buckets of the activity: the marker
// Redis holds for an activity of several (stock.Keys.Layout), else 1.
func BucketsOf(ctx context.Context, rdb redis.UniversalClient, prefix string, id int64) (int, error) {
	key := stock.KeysFor(prefix, id).Layout
	n, err := rdb.Get(ctx, key).Int()
	switch {
	case errors.Is(err, redis.Nil):
		return 1, nil
	case err != nil:
		return 0, fmt.Errorf("check: read %s: %w", key, err)
	case n < 1 || n > seckill.MaxBuckets:
		return 0, fmt.Errorf("check: %s holds %d buckets", key, n)
	}
	return n, nil
}

// pendingIDs lists the ids in the consumer group's pending entries list.
func pendingIDs(ctx context.Context, rdb redis.UniversalClient, stream string) (map[string]bool, error) {
	ids := map[string]bool{}
	start := "-"
	for {
		ps, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{
			Stream: stream, Group: streamGroup, Start: start, End: "+", Count: 1000,
		}).Result()
		if err != nil {
			return nil, fmt.Errorf("check: read pending entries of %s: %w", stream, err)
		}
		for _, p := range ps {
			ids[p.ID] = true
		}
		if len(ps) < 1000 {
			return ids, nil
		}
		start = "(" + ps[len(ps)-1].ID
	}
}

// Stream describes an activity's order stream and its consumer group (of
// an activity of several buckets: its streams, summed).
type Stream struct {
	// Length is the number of entries in the stream.
	Length int64
	// GroupExists is false until the worker creates its consumer group.
	GroupExists bool
	// Pending is the number of entries delivered to a worker and not yet
	// acknowledged.
	Pending int64
	// Undelivered reports whether entries were added after the last one
	// delivered to the group.
	Undelivered bool
	// LastDeliveredID is the group's last delivered entry id ("" with
	// several buckets).
	LastDeliveredID string
}

// Drained reports whether every entry has been delivered and acknowledged:
// every accepted grab has its outcome in the database.
func (s Stream) Drained() bool {
	return s.Pending == 0 && !s.Undelivered
}

func (s Stream) String() string {
	if !s.GroupExists {
		return fmt.Sprintf("%d entries, no consumer group %q", s.Length, streamGroup)
	}
	return fmt.Sprintf("%d entries, %d pending, undelivered %t", s.Length, s.Pending, s.Undelivered)
}

// StreamStatus reads the state of an activity's order streams (one per
// bucket) in a few commands each, without walking them.
func StreamStatus(ctx context.Context, rdb redis.UniversalClient, prefix string, id int64) (Stream, error) {
	buckets, err := BucketsOf(ctx, rdb, prefix, id)
	if err != nil {
		return Stream{}, err
	}
	if buckets == 1 {
		return streamStatus(ctx, rdb, stock.KeysFor(prefix, id).Orders)
	}
	all := Stream{GroupExists: true}
	for b := range buckets {
		s, err := streamStatus(ctx, rdb, stock.BucketKeys(prefix, id, buckets, b).Orders)
		if err != nil {
			return all, err
		}
		all.Length += s.Length
		all.Pending += s.Pending
		all.Undelivered = all.Undelivered || s.Undelivered
		// A bucket without a stream has had no grab: nothing to drain.
		all.GroupExists = all.GroupExists && (s.GroupExists || s.Length == 0)
	}
	return all, nil
}

// streamStatus is StreamStatus of the stream at key.
func streamStatus(ctx context.Context, rdb redis.UniversalClient, key string) (Stream, error) {
	var s Stream
	n, err := rdb.XLen(ctx, key).Result()
	if err != nil {
		return s, fmt.Errorf("check: XLEN %s: %w", key, err)
	}
	s.Length = n
	groups, err := rdb.XInfoGroups(ctx, key).Result()
	switch {
	case err != nil && isNoSuchKey(err):
		return s, nil // no stream: nothing was ever accepted
	case err != nil:
		return s, fmt.Errorf("check: XINFO GROUPS %s: %w", key, err)
	}
	for _, g := range groups {
		if g.Name == streamGroup {
			s.GroupExists = true
			s.Pending = g.Pending
			s.LastDeliveredID = g.LastDeliveredID
		}
	}
	if n == 0 {
		return s, nil
	}
	last, err := rdb.XRevRangeN(ctx, key, "+", "-", 1).Result()
	if err != nil {
		return s, fmt.Errorf("check: XREVRANGE %s: %w", key, err)
	}
	if len(last) > 0 {
		s.Undelivered = !s.GroupExists || compareIDs(last[0].ID, s.LastDeliveredID) > 0
	}
	return s, nil
}

func isNoSuchKey(err error) bool {
	return strings.Contains(err.Error(), "no such key")
}

// WaitDrained polls the activity's order stream until every entry has been
// delivered to the worker group and acknowledged, or until timeout (or ctx)
// runs out; then it returns an error that tells the last state seen.
func WaitDrained(ctx context.Context, rdb redis.UniversalClient, prefix string, activityID int64, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		s, err := StreamStatus(ctx, rdb, prefix, activityID)
		if err == nil && s.Drained() {
			return nil
		}
		if ctx.Err() == nil && time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("check: activity %d not drained after %s: %w", activityID, timeout, err)
			}
			return fmt.Errorf("check: activity %d not drained after %s: %s", activityID, timeout, s)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("check: wait for activity %d to drain: %w", activityID, ctx.Err())
		case <-tick.C:
		}
	}
}

// compareIDs orders two stream ids ("<ms>-<seq>"); "" sorts first.
func compareIDs(a, b string) int {
	am, as := splitID(a)
	bm, bs := splitID(b)
	if c := cmp.Compare(am, bm); c != 0 {
		return c
	}
	return cmp.Compare(as, bs)
}

func splitID(id string) (uint64, uint64) {
	ms, seq, _ := strings.Cut(id, "-")
	m, _ := strconv.ParseUint(ms, 10, 64)
	s, _ := strconv.ParseUint(seq, 10, 64)
	return m, s
}
