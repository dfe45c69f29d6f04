// Package idgen makes 64-bit, time-ordered ids that are unique across
// processes, snowflake style: 41 bits of milliseconds since Epoch, 10 bits of
// node id, 12 bits of sequence. Each running process must use a distinct
// node id.
//
// The service does not use it: Redis issues its order ids, which name their
// activity (see seckill.OrderID). The database-only strategies of
// `seckill bench --compare` (package compare), which have no Redis script
// to issue ids, do.
package idgen

import (
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

// Generator issues ids for one node. It is safe for concurrent use and
// lock-free.
type Generator struct {
	node atomic.Int64
	// last is the last issued (milliseconds << seqBits | sequence). When the
	// sequence of a millisecond is used up, or the clock steps back, ids
	// continue from last+1: they borrow from the future instead of repeating.
	last atomic.Int64
}

// New returns a generator for a node id in [0, MaxNode] that the caller
// guarantees no other running instance uses.
func New(node int64) *Generator {
	g := &Generator{}
	g.setNode(node)
	return g
}

func (g *Generator) setNode(node int64) {
	if node < 0 || node > MaxNode {
		panic("idgen: node id out of range")
	}
	g.node.Store(node)
}

// Node returns the node id.
func (g *Generator) Node() int64 { return g.node.Load() }

// Next returns a new id. The error is always nil; it keeps the signature of
// generators that can fail.
func (g *Generator) Next() (int64, error) {
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
