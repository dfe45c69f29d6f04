package lock

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"
)

// Latch is a distributed countdown latch, as Redisson's RCountDownLatch:
// TrySetCount sets a count, CountDown lowers it by one, and Await returns
// once it reaches zero, in any process. The latch opens once: setting it
// again after that is a new round, which earlier awaiters do not wait for.
//
// Awaiters do not poll. Each takes a place in Redis and waits for a message
// on its client's channel (the subscription the lock's waiters use): the
// CountDown that reaches zero marks every place opened and sends one message
// per awaiter. An awaiter asks Redis after each message, after its client
// (re)subscribes (a message sent meanwhile is lost), and every 20 s, which
// keeps its place (a place lasts 60 s: an awaiter that is gone is dropped
// by then). The mark lets an awaiter whose message was lost learn that the
// latch opened even if it was set again before it asked.
//
// A latch named n lives at prefix+"{n}:latch", its awaiters at
// prefix+"{n}:latch:w" (a name with its own hash tag keeps it, as for
// locks): one Cluster slot. The count exists only while above zero.
//
// Expiry: the latch is deleted by Redis once neither TrySetCount nor
// CountDown touched it for its expiry (DefaultLatchExpiry, 24 h;
// WithLatchExpiry), so that a latch whose counters died does not stay
// forever. Deleted, it reads as zero, as an opened one: its awaiters return
// at their next look (within 20 s), without error. Give an expiry longer
// than any gap between two CountDowns; the one in force is that of the
// last TrySetCount. Latches need a single Redis (standalone, Sentinel or
// Cluster), not Redlock.
type Latch struct {
	c      *Client
	name   string
	keys   []string // the latch, its awaiters
	expiry time.Duration
}

// DefaultLatchExpiry is how long a latch lives untouched by default.
const DefaultLatchExpiry = 24 * time.Hour

// latchPlace is how long an awaiter's place lasts; it asks every third of
// that. The place only serves to send the awaiter the opening's message
// (and mark): one that is gone costs a message to nobody until then.
const latchPlace = 60 * time.Second

// LatchOption configures a Latch.
type LatchOption func(*Latch)

// WithLatchExpiry sets how long the latch lives when neither TrySetCount
// nor CountDown touches it (at least 1 ms). Default: DefaultLatchExpiry.
func WithLatchExpiry(d time.Duration) LatchOption {
	return func(l *Latch) { l.expiry = max(d, time.Millisecond) }
}

// Latch returns the countdown latch called name. Latch names are apart
// from lock names: a latch and a lock may share one.
func (c *Client) Latch(name string, opts ...LatchOption) *Latch {
	k := c.keys(name)[0]
	l := &Latch{c: c, name: name, keys: []string{k + ":latch", k + ":latch:w"}, expiry: DefaultLatchExpiry}
	for _, o := range opts {
		o(l)
	}
	return l
}

var (
	//go:embed scripts/latch_set.lua
	latchSetLua string
	//go:embed scripts/latch_down.lua
	latchDownLua string
	//go:embed scripts/latch_await.lua
	latchAwaitLua string
	//go:embed scripts/latch_count.lua
	latchCountLua string

	latchSetScript   = newScript("", latchSetLua)
	latchDownScript  = newScript("", latchDownLua)
	latchAwaitScript = newScript("", latchAwaitLua)
	latchCountScript = newScript("", latchCountLua)
)

// check refuses a latch on Redlock, and a closed client.
func (l *Latch) check() error {
	if l.c.redlock() {
		return fmt.Errorf("%w: latch %q on Redlock: latches need a single Redis", ErrOption, l.name)
	}
	if l.c.ctx.Err() != nil {
		return ErrClosed
	}
	return nil
}

// TrySetCount sets the count to n (at least 1) if it is zero (the latch is
// open, expired or was never set), and reports whether it did. It sets the
// latch's expiry too.
func (l *Latch) TrySetCount(ctx context.Context, n int64) (bool, error) {
	if err := l.check(); err != nil {
		return false, err
	}
	if n < 1 {
		return false, fmt.Errorf("%w: latch %q: count %d, at least 1", ErrOption, l.name, n)
	}
	v, err := run(ctx, l.c.nodes[0], latchSetScript, l.keys[:1],
		[]string{strconv.FormatInt(n, 10), ms(l.expiry)})
	return v == 1, err
}

// CountDown lowers the count by one; the call that brings it to zero opens
// the latch and wakes its awaiters. An open latch stays at zero.
func (l *Latch) CountDown(ctx context.Context) error {
	if err := l.check(); err != nil {
		return err
	}
	_, err := run(ctx, l.c.nodes[0], latchDownScript, l.keys, []string{l.c.chanbase, ms(latchPlace)})
	return err
}

// Count returns the count: 0 when the latch is open, expired or was never
// set.
func (l *Latch) Count(ctx context.Context) (int64, error) {
	if err := l.check(); err != nil {
		return 0, err
	}
	return run(ctx, l.c.nodes[0], latchCountScript, l.keys[:1], nil)
}

// Await returns nil once the count is zero (at once if it is), ctx's error
// when ctx ends first, ErrClosed when the client is closed, or a Redis
// error. It waits without polling (see Latch): one script to ask, one per
// wake-up, and one every 20 s.
func (l *Latch) Await(ctx context.Context) error {
	if err := l.check(); err != nil {
		return err
	}
	c := l.c
	tok := c.id + "." + strconv.FormatUint(c.seq.Add(1), 36)
	c.subscribe()
	w := c.waiters.add(tok)
	defer c.waiters.remove(tok)
	ask := []string{tok, "1", ms(latchPlace)}
	timer := time.NewTimer(latchPlace / 3)
	defer timer.Stop()
	for {
		n, err := run(ctx, c.nodes[0], latchAwaitScript, l.keys, ask)
		switch {
		case err != nil && ctx.Err() != nil:
			return l.leave(ctx, tok, ctx.Err())
		case err != nil:
			return l.leave(ctx, tok, err)
		case n == 0:
			return nil
		}
		timer.Reset(latchPlace / 3)
		select {
		case <-ctx.Done():
			return l.leave(ctx, tok, ctx.Err())
		case <-c.ctx.Done():
			return l.leave(ctx, tok, ErrClosed)
		case <-w.wake: // a message, or a new subscription: ask
		case <-timer.C: // ask, and keep the place
		}
	}
}

// leave gives up the awaiter tok's place, even when ctx has ended, and
// returns err. A place that could not be given up runs out on its own.
func (l *Latch) leave(ctx context.Context, tok string, err error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_, _ = run(ctx, l.c.nodes[0], latchAwaitScript, l.keys, []string{tok, "0", ms(latchPlace)})
	return err
}
