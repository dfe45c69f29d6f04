package lock

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Kind is the kind of a lock: what its name is held as.
type Kind string

// Kinds of locks.
const (
	KindMutex     Kind = "mutex"
	KindSemaphore Kind = "semaphore"
	KindRWLock    Kind = "rwlock"
)

// State is what Inspect finds of a lock, whoever holds it.
type State struct {
	Name    string
	Kind    Kind          // "" when nobody holds it
	Permits int           // a semaphore's permits
	Holds   []Hold        // by fencing token
	Waiters int           // waiting in line, in all processes
	TTL     time.Duration // until the last hold's lease ends
}

// Locked reports whether anyone holds the lock.
func (s State) Locked() bool { return len(s.Holds) > 0 }

// Hold is one holder of a lock.
type Hold struct {
	ID       string        // the hold's own token: the holding client's id, '.', a number
	Token    int64         // fencing token
	TTL      time.Duration // lease left
	Slot     int           // a semaphore permit's slot: the lowest of Slots
	Slots    []int         // a semaphore hold's slots, one per permit (Semaphore.AcquireN)
	Mode     string        // "read" or "write" for a read-write lock, else ""
	Owner    string        // a reentrant mutex's owner
	Metadata string        // given with WithMetadata
}

// Inspect describes the lock called name (a mutex, semaphore or read-write
// lock), whoever holds it. With Redlock it lists the holds that a quorum
// of nodes agrees on.
func (c *Client) Inspect(ctx context.Context, name string) (State, error) {
	return c.describe(ctx, name, inspectScript, nil, c.quorum)
}

// IsLocked reports whether anyone holds the lock called name.
func (c *Client) IsLocked(ctx context.Context, name string) (bool, error) {
	s, err := c.Inspect(ctx, name)
	return s.Locked(), err
}

// ForceUnlock is for administrators: it removes every hold of the lock
// called name, whoever holds it, gives the lock to the waiters in line, and
// returns what it removed. The holders learn of it at their next renewal,
// which is refused: their contexts end with ErrLost. Until then they
// believe they hold the lock, which is why a resource must check fencing
// tokens. With Redlock it removes the holds on every node it reaches.
func (c *Client) ForceUnlock(ctx context.Context, name string) (State, error) {
	return c.describe(ctx, name, forceScript, []string{c.fifo(), c.chanbase}, 1)
}

// inspectTimeout bounds how long Inspect and ForceUnlock await a node.
const inspectTimeout = time.Second

// describe runs the inspect or force script on every node, and merges
// their answers: the holds present on at least need nodes.
func (c *Client) describe(ctx context.Context, name string, s *script, args []string, need int) (State, error) {
	k := c.keys(name)
	res := each(c, ctx, inspectTimeout, func(ctx context.Context, r Redis) (State, error) {
		out, err := runStrings(ctx, r, s, k[:], args)
		if err != nil {
			return State{}, err
		}
		return parseState(name, out)
	}, nil)
	if !c.redlock() {
		return res[0].v, res[0].err
	}
	qe := QuorumError{Op: "inspect", Quorum: need}
	var states []State
	for i, r := range res {
		if r.err != nil {
			qe.Nodes = append(qe.Nodes, &NodeError{Node: i, Err: r.err})
			continue
		}
		states = append(states, r.v)
	}
	qe.OK = len(states)
	if len(states) < max(need, c.quorum) && (s == inspectScript || len(states) == 0) {
		return State{Name: name}, &qe
	}
	return merge(name, states, need), nil
}

// merge keeps the holds that at least need of states list; tokens are
// the largest seen, TTLs the need-th longest.
func merge(name string, states []State, need int) State {
	out := State{Name: name}
	type seen struct {
		Hold
		ttls []time.Duration
	}
	holds := map[string]*seen{}
	for _, s := range states {
		out.Waiters = max(out.Waiters, s.Waiters)
		for _, h := range s.Holds {
			if holds[h.ID] == nil {
				holds[h.ID] = &seen{Hold: h}
				if out.Kind == "" {
					out.Kind, out.Permits = s.Kind, s.Permits
				}
			}
			x := holds[h.ID]
			x.Token = max(x.Token, h.Token)
			x.ttls = append(x.ttls, h.TTL)
		}
	}
	for _, x := range holds {
		if len(x.ttls) < need {
			continue
		}
		slices.SortFunc(x.ttls, func(a, b time.Duration) int { return cmp.Compare(b, a) })
		x.TTL = x.ttls[need-1]
		out.Holds = append(out.Holds, x.Hold)
		out.TTL = max(out.TTL, x.TTL)
	}
	if len(out.Holds) == 0 {
		out.Kind, out.Permits = "", 0
	}
	slices.SortFunc(out.Holds, func(a, b Hold) int { return cmp.Compare(a.Token, b.Token) })
	return out
}

// parseState reads the reply of the inspect and force scripts (see
// describe in scripts/lib.lua).
func parseState(name string, r []string) (State, error) {
	bad := fmt.Errorf("lock: inspect script replied %q", r)
	if len(r) < 5 {
		return State{}, bad
	}
	var perr error
	num := func(s string) int64 {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil && perr == nil {
			perr = fmt.Errorf("%w: %w", bad, err)
		}
		return n
	}
	s := State{Name: name, Kind: map[string]Kind{"m": KindMutex, "s": KindSemaphore, "rw": KindRWLock}[r[0]]}
	s.Permits = int(num(r[1]))
	s.Waiters = int(num(r[2]))
	s.TTL = time.Duration(num(r[3])) * time.Millisecond
	n := int(num(r[4]))
	if len(r) != 5+6*n {
		return State{}, bad
	}
	for i := 5; i < len(r); i += 6 {
		h := Hold{ID: r[i], Token: num(r[i+1]), TTL: time.Duration(num(r[i+2])) * time.Millisecond,
			Owner: r[i+4], Metadata: r[i+5]}
		switch x := r[i+3]; {
		case s.Kind == KindSemaphore:
			for f := range strings.SplitSeq(x, ",") {
				h.Slots = append(h.Slots, int(num(f)))
			}
			h.Slot = h.Slots[0]
		case x == "r":
			h.Mode = "read"
		case x == "w":
			h.Mode = "write"
		}
		s.Holds = append(s.Holds, h)
	}
	slices.SortFunc(s.Holds, func(a, b Hold) int { return cmp.Compare(a.Token, b.Token) })
	return s, perr
}
