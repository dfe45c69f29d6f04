package stock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill"
)

// ParseEntry turns an order stream entry (o=<local order id> u=<uid>, its
// id's milliseconds the time of the grab; see grab.lua) into an
// OrderRequest with the full order id (seckill.OrderID).
func ParseEntry(activityID int64, m redis.XMessage) (seckill.OrderRequest, error) {
	field := func(name string) (int64, error) {
		s, _ := m.Values[name].(string)
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 {
			return 0, fmt.Errorf("stock: stream entry %s of activity %d: bad field %s=%q", m.ID, activityID, name, s)
		}
		return n, nil
	}
	local, err := field("o")
	if err != nil {
		return seckill.OrderRequest{}, err
	}
	if local > seckill.MaxOrderLocal {
		return seckill.OrderRequest{}, fmt.Errorf("stock: stream entry %s of activity %d: local order id %d out of range", m.ID, activityID, local)
	}
	uid, err := field("u")
	if err != nil {
		return seckill.OrderRequest{}, err
	}
	msPart, _, _ := strings.Cut(m.ID, "-")
	ms, err := strconv.ParseInt(msPart, 10, 64)
	if err != nil {
		return seckill.OrderRequest{}, fmt.Errorf("stock: stream entry id %q of activity %d: %w", m.ID, activityID, err)
	}
	return seckill.OrderRequest{OrderID: seckill.OrderID(activityID, local), ActivityID: activityID, UserID: uid,
		CreatedAt: unixMilli(ms)}, nil
}

// StreamStats describes an activity's order stream.
type StreamStats struct {
	Length  int64 // entries in the stream (acknowledged ones until trimmed)
	Pending int64 // delivered to a worker, not yet acknowledged
	Lag     int64 // not yet delivered to any worker
}

// Backlog is the number of orders not yet written to the database.
func (s StreamStats) Backlog() int64 { return s.Pending + s.Lag }

// add sums two streams' figures.
func (s StreamStats) add(o StreamStats) StreamStats {
	return StreamStats{Length: s.Length + o.Length, Pending: s.Pending + o.Pending, Lag: s.Lag + o.Lag}
}

// Stats returns the figures of the activity's streams, summed over its
// buckets; zero if no stream exists.
func (e *Engine) Stats(ctx context.Context, a seckill.Activity) (StreamStats, error) {
	st, err := e.StatsOf(ctx, []seckill.Activity{a})
	return st[a.ID], err
}

// StatsOf returns the figures of many activities' streams (summed over
// each one's buckets) in at most three pipelined round trips, whatever
// their number (zero for a stream that does not exist).
func (e *Engine) StatsOf(ctx context.Context, as []seckill.Activity) (map[int64]StreamStats, error) {
	var keys []string
	var owner []int64
	for i := range as {
		for _, k := range e.layout(&as[i]).keys {
			keys = append(keys, k.Orders)
			owner = append(owner, as[i].ID)
		}
	}
	st, err := e.statsOfKeys(ctx, keys)
	if err != nil {
		return nil, err
	}
	out := make(map[int64]StreamStats, len(as))
	for i, id := range owner {
		out[id] = out[id].add(st[i])
	}
	return out, nil
}

// statsOfKeys returns the figures of the streams named by keys, in order,
// in at most three pipelined round trips.
func (e *Engine) statsOfKeys(ctx context.Context, keys []string) ([]StreamStats, error) {
	out := make([]StreamStats, len(keys))
	pipe := e.rdb.Pipeline()
	groups := make([]*redis.XInfoGroupsCmd, len(keys))
	lengths := make([]*redis.IntCmd, len(keys))
	for i, k := range keys {
		groups[i] = pipe.XInfoGroups(ctx, k)
		lengths[i] = pipe.XLen(ctx, k)
	}
	_, _ = pipe.Exec(ctx)
	// The lag Redis reports can be unknown (-1 after deletions) or, on
	// embedded servers, wrong; whether anything waits is checked here.
	pipe = e.rdb.Pipeline()
	waiting := make(map[int]*redis.XMessageSliceCmd)
	lags := make(map[int]int64)
	for i, key := range keys {
		gs, err := groups[i].Result()
		if err != nil {
			if isNoStream(err) {
				continue
			}
			return nil, err
		}
		length, err := lengths[i].Result()
		if err != nil {
			return nil, err
		}
		st := StreamStats{Length: length}
		for _, g := range gs {
			if g.Name != Group {
				continue
			}
			st.Pending = g.Pending
			next, err := nextID(g.LastDeliveredID)
			if err != nil {
				return nil, err
			}
			waiting[i] = pipe.XRangeN(ctx, key, next, "+", 1)
			lags[i] = g.Lag
		}
		out[i] = st
	}
	if len(waiting) == 0 {
		return out, nil
	}
	_, _ = pipe.Exec(ctx)
	for i, cmd := range waiting {
		msgs, err := cmd.Result()
		if err != nil {
			return nil, err
		}
		if len(msgs) > 0 {
			out[i].Lag = max(lags[i], 1)
		}
	}
	return out, nil
}

// Trim deletes the acknowledged entries of an order stream (a bucket's,
// Keys.Orders): those below both the lowest pending entry and the group's
// last delivered one. Unacknowledged entries are never trimmed (XADD MAXLEN
// would lose them).
func (e *Engine) Trim(ctx context.Context, stream string) (int64, error) {
	groups, err := e.rdb.XInfoGroups(ctx, stream).Result()
	if err != nil {
		if isNoStream(err) {
			return 0, nil
		}
		return 0, err
	}
	var last string
	for _, g := range groups {
		if g.Name == Group {
			last = g.LastDeliveredID
		}
	}
	if last == "" || last == "0-0" || last == "0" {
		return 0, nil
	}
	minID, err := nextID(last)
	if err != nil {
		return 0, err
	}
	p, err := e.rdb.XPending(ctx, stream, Group).Result()
	if err != nil {
		return 0, err
	}
	if p.Count > 0 {
		minID = p.Lower
	}
	return e.rdb.XTrimMinID(ctx, stream, minID).Result()
}

// nextID returns the stream id right after id ("ms-seq", or "ms" for
// "ms-0", as the embedded Redis reports a new group's last id).
func nextID(id string) (string, error) {
	ms, seq, err := parseID(id)
	if err != nil {
		return "", err
	}
	return strconv.FormatUint(ms, 10) + "-" + strconv.FormatUint(seq+1, 10), nil
}

func parseID(id string) (ms, seq uint64, err error) {
	msPart, seqPart, hasSeq := strings.Cut(id, "-")
	ms, err = strconv.ParseUint(msPart, 10, 64)
	if err == nil && hasSeq {
		seq, err = strconv.ParseUint(seqPart, 10, 64)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("stock: bad stream id %q", id)
	}
	return ms, seq, nil
}

// IDLess reports whether stream id a comes before b; ids that do not
// parse compare as equal.
func IDLess(a, b string) bool {
	am, as, err1 := parseID(a)
	bm, bs, err2 := parseID(b)
	if err1 != nil || err2 != nil {
		return false
	}
	return am < bm || am == bm && as < bs
}

func isNoStream(err error) bool {
	return errors.Is(err, redis.Nil) || strings.Contains(err.Error(), "no such key") ||
		strings.HasPrefix(err.Error(), "NOGROUP")
}

// IsNoGroup reports whether err is Redis' NOGROUP: the stream or its group
// does not exist (the activity is not loaded).
func IsNoGroup(err error) bool { return err != nil && strings.HasPrefix(err.Error(), "NOGROUP") }
