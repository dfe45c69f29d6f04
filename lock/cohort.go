package lock

import (
	"context"
	"fmt"
	"time"
)

// A cohort is the goroutines of one client that Lock the same plain mutex
// with the same lease under a watchdog (the defaults), on one Redis. One of
// them at a time (the representative) waits in line in Redis for the
// cohort; the others wait in a line in this process. When a hold of the
// cohort is unlocked while another of its goroutines waits, the hold is
// passed on in-process, without Redis: the next goroutine gets the same
// Redis hold, with its lease as it stands, and the next fencing token of
// the block that Redis reserved for it (scripts/core.lua: a hold that comes
// from Lock reserves 1+localPasses tokens). After localPasses passes, or
// when nobody of the cohort waits, Unlock releases the lock in Redis, to
// another client's waiter first when the cohort passed it on (fairness: a
// waiter waits for at most 1+localPasses holds of each client ahead of it,
// as it did when Redis passed the lock within a client); the cohort's next
// goroutine, if any, becomes its representative and joins the Redis line.
//
// This is lock cohorting (Dice, Marathe, Shavit, "Lock Cohorting", PPoPP
// 2012) over Redis: a handoff within a process costs a goroutine wake-up
// instead of a release, a message and a wake-up across the network, and a
// cohort of n goroutines waits with one place in the Redis line instead of n.
//
// Safety: a hold is passed on only while its holder still believes it valid
// (not lost, its validity not elapsed): the next holder believes no more
// than the process already did, and renews first when less than a third of
// the lease is left. Each holder has its own fencing token, larger than
// every earlier holder's in any process (the block is reserved in Redis
// when the cohort gets the lock), so a resource fences cohort holders as it
// fences any others. A hold that is lost wakes the cohort's next goroutine,
// which asks Redis.
type cohort struct {
	key    string // in Client.cohorts
	holder *Lock  // the hold of the cohort's Redis hold, or nil
	rep    bool   // a goroutine of the cohort waits for it in Redis
	line   []chan *Lock
}

// localPasses is how many times in a row a hold is passed on in-process:
// Redis reserves one token more than that per hold (block in core.lua).
const localPasses = 16

// cohortKey returns the cohort l would join, or "" when it joins none: only
// plain mutexes with a watchdog (a fixed lease must run from the
// acquisition: it cannot be inherited) that wait until ctx ends (a retry
// strategy that gives up is kept by the Redis line), on one Redis.
func (c *Client) cohortKey(l *Lock) string {
	if c.redlock() || l.spec != "p" || !l.watchdog || l.retrySet {
		return ""
	}
	return l.keys[0] + " " + l.leaseArg
}

// waitCohort takes l, waiting in its cohort (see cohort).
func (c *Client) waitCohort(ctx context.Context, l *Lock, key string) error {
	if c.ctx.Err() != nil {
		return ErrClosed
	}
	c.local.Lock()
	co := c.cohorts[key]
	if co == nil {
		co = &cohort{key: key}
		c.cohorts[key] = co
	}
	if co.holder == nil && !co.rep {
		co.rep = true
		c.local.Unlock()
		return c.represent(ctx, l, co)
	}
	ch := make(chan *Lock, 1) // nil: represent the cohort; else the hold passed on
	co.line = append(co.line, ch)
	c.local.Unlock()

	for {
		var from *Lock
		select {
		case from = <-ch:
		case <-ctx.Done():
			return c.leaveCohort(ctx, l, co, ch, fmt.Errorf("%w (%w)", ErrNotObtained, ctx.Err()))
		case <-c.ctx.Done():
			return c.leaveCohort(ctx, l, co, ch, fmt.Errorf("%w (%w)", ErrNotObtained, ErrClosed))
		}
		if from == nil {
			return c.represent(ctx, l, co)
		}
		switch err := c.takeOver(ctx, l, from); {
		case err == nil:
			return nil
		case err == ErrNotHeld:
			// lost before it could be used: ask Redis, first of the cohort
			c.local.Lock()
			if co.holder == nil && !co.rep {
				co.rep = true
				c.local.Unlock()
				return c.represent(ctx, l, co)
			}
			co.line = append([]chan *Lock{ch}, co.line...)
			c.local.Unlock()
		default:
			return err
		}
	}
}

// represent takes l in Redis for the cohort co, waiting in line there.
func (c *Client) represent(ctx context.Context, l *Lock, co *cohort) error {
	err := c.waitFor(ctx, l)
	c.local.Lock()
	defer c.local.Unlock()
	co.rep = false
	if err != nil {
		c.nextRep(co)
		return err
	}
	l.co, l.passes = co, localPasses
	co.holder = l
	return nil
}

// nextRep makes the cohort's first waiting goroutine its representative,
// or forgets the cohort when nobody of it waits or holds. c.local is held;
// co has no holder and no representative.
func (c *Client) nextRep(co *cohort) {
	if len(co.line) == 0 {
		if co.holder == nil && !co.rep && c.cohorts[co.key] == co {
			delete(c.cohorts, co.key)
		}
		return
	}
	ch := co.line[0]
	co.line = co.line[1:]
	co.rep = true
	ch <- nil
}

// leaveCohort takes a goroutine whose wait ended out of the cohort's line.
// When it was already given the hold or the representation, it hands them
// on. It returns err.
func (c *Client) leaveCohort(ctx context.Context, l *Lock, co *cohort, ch chan *Lock, err error) error {
	c.local.Lock()
	for i, x := range co.line {
		if x == ch {
			co.line = append(co.line[:i], co.line[i+1:]...)
			c.local.Unlock()
			return err
		}
	}
	c.local.Unlock()
	// Sent before it was taken out of the line, under c.local: it is here.
	from := <-ch
	if from == nil {
		c.local.Lock()
		co.rep = false
		c.nextRep(co)
		c.local.Unlock()
		return err
	}
	switch c.takeOver(ctx, l, from) {
	case nil:
		l.arm()
		_ = l.Unlock(context.WithoutCancel(ctx))
	case ErrNotHeld:
		c.local.Lock()
		if co.holder == nil && !co.rep {
			c.nextRep(co)
		}
		c.local.Unlock()
	}
	return err
}

// takeOver makes l the holder of the hold that from passed on. When that
// hold turns out lost, it lets the cohort go of it and returns ErrNotHeld:
// l is as it was, holding nothing. When its renewal fails, the hold is
// passed on or released, and takeOver returns the error.
func (c *Client) takeOver(ctx context.Context, l *Lock, from *Lock) error {
	from.mu.Lock()
	validUntil := from.validUntil
	from.mu.Unlock()
	own := l.tok
	l.tok, l.token, l.passes, l.co = from.tok, from.token+1, from.passes-1, from.co
	l.acquired, l.validUntil = time.Now(), validUntil
	c.local.Lock()
	l.co.holder = l
	c.local.Unlock()
	if time.Until(validUntil) > l.lease/3 {
		return nil
	}
	// little of the lease left (renewals failing): renew before using it
	start := time.Now()
	switch st, err := c.extend(ctx, l, l.lease); st {
	case done:
		l.validUntil = start.Add(l.lease - drift(l.lease))
		return nil
	case refused:
		c.local.Lock()
		if l.co.holder == l {
			l.co.holder = nil
		}
		c.local.Unlock()
		l.tok, l.token, l.passes, l.co = own, 0, 0, nil
		return ErrNotHeld
	default:
		l.arm()
		_ = l.Unlock(context.WithoutCancel(ctx))
		return notObtained(ctx, err)
	}
}

// passOn passes l's hold on to the next goroutine of its cohort when one
// waits, l is still valid and has passes left; it reports whether it did.
// Otherwise the cohort lets go of the hold (its next goroutine, if any,
// represents it in Redis), and passOn reports whether the release should
// let another client's waiter go first.
func (c *Client) passOn(l *Lock, valid bool) (passed, others bool) {
	c.local.Lock()
	defer c.local.Unlock()
	co := l.co
	if co.holder != l {
		return false, false // lost: the cohort let go of it already
	}
	if valid && l.passes > 0 && len(co.line) > 0 && c.ctx.Err() == nil {
		ch := co.line[0]
		co.line = co.line[1:]
		ch <- l
		return true, false
	}
	co.holder = nil
	c.nextRep(co)
	return false, l.passes < localPasses
}

// dropLost lets the cohort of a lost hold go of it, so that its next
// goroutine asks Redis (the holder may never call Unlock).
func (c *Client) dropLost(l *Lock) {
	c.local.Lock()
	defer c.local.Unlock()
	if co := l.co; co.holder == l {
		co.holder = nil
		if !co.rep {
			c.nextRep(co)
		}
	}
}
