package cluster

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill/check"
	"github.com/seckilldev/seckill/stock"
)

// Checker reads a sale's state straight from Redis and the database, never
// through a proxy that a test cuts or through the service under test.
type Checker struct {
	DB     *sql.DB
	Redis  redis.UniversalClient
	Prefix string
}

// OpenChecker connects to the servers.
func OpenChecker(ctx context.Context, redisURL, dbURL, prefix string) (*Checker, error) {
	db, err := check.Open(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	rdb, err := stock.Dial(ctx, redisURL)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("cluster: checker: %w", err)
	}
	return &Checker{DB: db, Redis: rdb, Prefix: prefix}, nil
}

// Close closes the connections.
func (c *Checker) Close() error {
	return errors.Join(c.Redis.Close(), c.DB.Close())
}

// Drain waits until every accepted grab of the activity has been written
// to the database and acknowledged.
func (c *Checker) Drain(ctx context.Context, activityID int64, timeout time.Duration) error {
	return check.WaitDrained(ctx, c.Redis, c.Prefix, activityID, timeout)
}

// Backlog returns the entries of the activity's stream not yet
// acknowledged (pending or never delivered), as StreamStatus sees them.
func (c *Checker) Backlog(ctx context.Context, activityID int64) (check.Stream, error) {
	return check.StreamStatus(ctx, c.Redis, c.Prefix, activityID)
}

// PendingOf returns the number of entries of the activity's streams (one
// per bucket) that consumer holds unacknowledged: a worker with a batch in
// hand.
func (c *Checker) PendingOf(ctx context.Context, activityID int64, consumer string) (int64, error) {
	keys, err := c.keys(ctx, activityID)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, k := range keys {
		p, err := c.Redis.XPending(ctx, k.Orders, stock.Group).Result()
		if err != nil {
			return 0, err
		}
		n += p.Consumers[consumer]
	}
	return n, nil
}

// keys returns the keys of every bucket of the activity.
func (c *Checker) keys(ctx context.Context, activityID int64) ([]stock.Keys, error) {
	n, err := check.BucketsOf(ctx, c.Redis, c.Prefix, activityID)
	if err != nil {
		return nil, err
	}
	keys := make([]stock.Keys, n)
	for b := range n {
		keys[b] = stock.BucketKeys(c.Prefix, activityID, n, b)
	}
	return keys, nil
}

// Check runs every invariant of package check against the answers, and
// adds the sampled "remaining never below 0" of s if given.
func (c *Checker) Check(ctx context.Context, activityID int64, answers *check.Answers, s *Sampler) (*check.Report, error) {
	rep, err := check.Run(ctx, check.Config{DB: c.DB, Redis: c.Redis, Prefix: c.Prefix, ActivityID: activityID, Answers: answers})
	if err != nil {
		return nil, err
	}
	if s != nil {
		r := s.Result()
		// next to I1, where it belongs
		rep.Results = append(rep.Results[:1], append([]check.Result{r}, rep.Results[1:]...)...)
	}
	return rep, nil
}

// SampledOversell is the name of the check made of samples taken while the
// sale runs: remaining stock never below zero, in Redis or the database.
const SampledOversell = "I1 remaining >= 0 sampled"

// Sampler reads the remaining stock in Redis and the database every
// interval while a sale runs: I1 asks for it never to be below zero
// anywhere, not only at the end.
type Sampler struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu                 sync.Mutex
	redisN, dbN        int64
	redisMin, dbMin    int64
	redisNeg, dbNeg    int64
	redisFail, dbFails int64
}

// Sample starts sampling the activity's remaining stock every interval
// until Stop: in Redis, the lowest of its buckets'.
func (c *Checker) Sample(activityID int64, every time.Duration) *Sampler {
	ctx, cancel := context.WithCancel(context.Background())
	s := &Sampler{cancel: cancel, done: make(chan struct{})}
	keys, err := c.keys(ctx, activityID)
	if err != nil {
		keys = []stock.Keys{stock.KeysFor(c.Prefix, activityID)}
	}
	q := "SELECT remaining FROM activities WHERE id = " + strconv.FormatInt(activityID, 10)
	go func() {
		defer close(s.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			rctx, rcancel := context.WithTimeout(ctx, time.Second)
			rv, rerr := lowest(rctx, c.Redis, keys)
			var dv int64
			derr := c.DB.QueryRowContext(rctx, q).Scan(&dv)
			rcancel()
			if ctx.Err() != nil {
				return
			}
			s.mu.Lock()
			if rerr == nil {
				s.redisMin = minFirst(s.redisMin, rv, s.redisN)
				s.redisN++
				if rv < 0 {
					s.redisNeg++
				}
			} else {
				s.redisFail++
			}
			if derr == nil {
				s.dbMin = minFirst(s.dbMin, dv, s.dbN)
				s.dbN++
				if dv < 0 {
					s.dbNeg++
				}
			} else {
				s.dbFails++
			}
			s.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// lowest reads the stock of each bucket, and returns the lowest.
func lowest(ctx context.Context, rdb redis.UniversalClient, keys []stock.Keys) (int64, error) {
	pipe := rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.HGet(ctx, k.Meta, stock.MetaLeft)
	}
	_, _ = pipe.Exec(ctx)
	var low int64
	for i, c := range cmds {
		v, err := c.Int64()
		if err != nil {
			return 0, err
		}
		if i == 0 || v < low {
			low = v
		}
	}
	return low, nil
}

func minFirst(cur, v, n int64) int64 {
	if n == 0 {
		return v
	}
	return min(cur, v)
}

// Stop ends the sampling.
func (s *Sampler) Stop() {
	s.cancel()
	<-s.done
}

// Result is the verdict of the samples so far.
func (s *Sampler) Result() check.Result {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.redisNeg + s.dbNeg
	return check.Result{
		Name: SampledOversell, Held: n == 0, Count: n,
		Detail: fmt.Sprintf("redis: %d samples, min %d (%d unreadable); db: %d samples, min %d (%d unreadable)",
			s.redisN, s.redisMin, s.redisFail, s.dbN, s.dbMin, s.dbFails),
	}
}
