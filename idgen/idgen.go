// Package idgen makes 64-bit, time-ordered order ids that are unique across
// instances, snowflake style: 41 bits of milliseconds since Epoch, 10 bits of
// node id, 12 bits of sequence. Each running instance must hold a distinct
// node id; Lease takes one from Redis with the lock library.
package idgen

import (
	"errors"
	"sync/atomic"
	"time"
)

// Epoch is the zero of the id clock: 2024-01-01 UTC. Ids last until 2093.
var Epoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

const (
	nodeBits = 10
	seqBits  = 12
	// MaxNode is the largest node id.
	MaxNode = 1<<nodeBits - 1
)

// ErrNoLease is returned while the generator's node id is not known to be
// held: issuing ids then could duplicate another instance's.
var ErrNoLease = errors.New("idgen: node id lease not held")

// Generator issues ids for one node. It is safe for concurrent use and
// lock-free.
type Generator struct {
	node atomic.Int64
	// last is the last issued (milliseconds << seqBits | sequence). When the
	// sequence of a millisecond is used up, or the clock steps back, ids
	// continue from last+1: they borrow from the future instead of repeating.
	last atomic.Int64
	// validUntil, for a leased generator, is the unix nanosecond up to which
	// the node id is known to be held.
	validUntil atomic.Int64
	leased     bool
}

// New returns a generator for a node id in [0, MaxNode] that the caller
// guarantees no other running instance uses.
func New(node int64) *Generator {
	g := &Generator{}
	g.setNode(node)
	return g
}

// NewLeased returns a generator that issues ids only while its node id is
// leased: until the time given to SetLease. A process paused past its lease
// (GC, SIGSTOP, a VM migration) resumes refusing ids, instead of issuing
// some under a node id that another instance may hold by then.
func NewLeased() *Generator {
	return &Generator{leased: true}
}

// SetLease sets the node id and the time until which it is held; a zero
// time stops the generator until the next SetLease.
func (g *Generator) SetLease(node int64, validUntil time.Time) {
	g.setNode(node)
	if validUntil.IsZero() {
		g.validUntil.Store(0)
		return
	}
	g.validUntil.Store(validUntil.UnixNano())
}

func (g *Generator) setNode(node int64) {
	if node < 0 || node > MaxNode {
		panic("idgen: node id out of range")
	}
	g.node.Store(node)
}

// Node returns the node id.
func (g *Generator) Node() int64 { return g.node.Load() }

// Next returns a new id.
func (g *Generator) Next() (int64, error) {
	if g.leased && time.Now().UnixNano() > g.validUntil.Load() {
		return 0, ErrNoLease
	}
	now := time.Since(Epoch).Milliseconds() << seqBits
	for {
		last := g.last.Load()
		next := max(now, last+1)
		if g.last.CompareAndSwap(last, next) {
			ms, seq := next>>seqBits, next&(1<<seqBits-1)
			return ms<<(nodeBits+seqBits) | g.node.Load()<<seqBits | seq, nil
		}
	}
}

// Time returns the time encoded in an id (when it was issued, give or take
// the borrowing described on Generator).
func Time(id int64) time.Time {
	return Epoch.Add(time.Duration(id>>(nodeBits+seqBits)) * time.Millisecond)
}

// NodeOf returns the node id encoded in an id.
func NodeOf(id int64) int64 { return id >> seqBits & MaxNode }
