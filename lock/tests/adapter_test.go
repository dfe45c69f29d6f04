package tests

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/lock/rueidislock"
)

// spin is a script that keeps Redis busy for ARGV[1] microseconds: an
// answer that comes later than the caller's deadline.
const spin = `
local t = redis.call('time')
local start = t[1] * 1000000 + t[2]
repeat
	t = redis.call('time')
until t[1] * 1000000 + t[2] - start >= tonumber(ARGV[1])
return 1`

// TestRueidisDeadlineKeepsConnection: a call whose deadline passes before
// Redis answers fails with context.DeadlineExceeded (or returns the answer,
// if that was in by the time its stalled caller looked), and the other
// calls that share its connection meanwhile are answered. rueidis sends a call
// with a deadline on an idle connection by itself, with the deadline on
// the socket; a late answer broke the connection, and the calls queued
// behind it failed with "context deadline exceeded" too. The lock sets
// such deadlines itself (a renewal ends with the validity, a cleanup gets a
// part of the lease): on a loaded machine one late renewal made another
// goroutine's Lock fail at once (TestCohortFencingUnderPauses, 6 runs in
// 20). A private redis-server: the script blocks it.
func TestRueidisDeadlineKeepsConnection(t *testing.T) {
	t.Parallel()
	// one connection (rueidis spreads calls over 4 by default)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{testenv.StartRedis(t).Addr},
		DisableRetry: true, ConnWriteTimeout: 2 * time.Second, PipelineMultiplex: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	r := rueidislock.New(c)
	ctx := ctxTimeout(t, 30*time.Second)
	for i := range 3 {
		// the connection idle again: rueidis redials a broken one
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if _, err := r.Eval(ctx, "return 1", nil, nil); err == nil {
				break
			} else if time.Now().After(deadline) {
				t.Fatal(err)
			}
		}
		late := make(chan error, 1)
		go func() {
			short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			_, err := r.Eval(short, spin, nil, []string{"400000"})
			late <- err
		}()
		time.Sleep(20 * time.Millisecond) // the late call is sent
		v, err := r.Eval(ctx, "return 2", nil, nil)
		if err != nil || v != 2 {
			t.Errorf("round %d: a call behind one past its deadline: %v, %v", i, v, err)
		}
		// its answer, when the caller was stalled until both were there
		if err := <-late; err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("round %d: a call past its deadline: %v, want context.DeadlineExceeded", i, err)
		}
	}
}
