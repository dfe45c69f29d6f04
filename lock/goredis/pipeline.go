package goredis

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// A pipeliner sends the calls that goroutines make at the same time
// together, in one pipeline, as rueidis does by itself: one write and one
// read for many scripts, on the client's side and on Redis'. go-redis
// sends each call on a connection of its own and waits for its answer, so
// 64 goroutines cost 64 round trips where a pipeline costs one.
//
// No delay is added: a call that finds one of the flusher slots free
// starts a flusher, which sends the queued calls at once (its own among
// them); calls that come while every slot is busy queue and go in the next
// pipeline. A flusher lives while calls are queued, then ends.
//
// A call whose context ends stops waiting; once sent, it runs, and its
// answer is read and dropped (the connection lives on). One not sent yet
// is not sent. Only a single server's client pipelines (a standalone or
// Sentinel *redis.Client): a Cluster pipeline waits for every node it
// names, so a hung node would hold up the answers of the others.
type pipeliner struct {
	c        *redis.Client
	mu       sync.Mutex
	queue    []*call
	flushing int // slots taken
}

type call struct {
	ctx  context.Context
	cmd  redis.Cmder
	done chan struct{}
}

const (
	// flushers is how many pipelines may be on their way at once.
	flushers = 4
	// maxBatch bounds a pipeline.
	maxBatch = 128
)

// process sends cmd, in a pipeline with the calls of other goroutines. It
// returns nil once cmd holds its answer, or ctx's error if ctx ended first:
// then cmd is the pipeline's still, and must not be read.
func (p *pipeliner) process(ctx context.Context, cmd redis.Cmder) error {
	c := &call{ctx: ctx, cmd: cmd, done: make(chan struct{})}
	p.mu.Lock()
	p.queue = append(p.queue, c)
	flush := p.flushing < flushers
	if flush {
		p.flushing++
	}
	p.mu.Unlock()
	if flush {
		go p.flush()
	}
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		select {
		case <-c.done: // answered meanwhile
			return nil
		default:
			return ctx.Err()
		}
	}
}

// flush sends the queued calls, a pipeline a round trip, holding a slot,
// until none is left. It runs on a goroutine of its own: a caller that sent
// the calls itself could not stop waiting when its context ends.
func (p *pipeliner) flush() {
	for {
		p.mu.Lock()
		n := min(len(p.queue), maxBatch)
		if n == 0 {
			p.flushing--
			p.mu.Unlock()
			return
		}
		batch := make([]*call, n)
		copy(batch, p.queue)
		rest := copy(p.queue, p.queue[n:])
		clear(p.queue[rest:])
		p.queue = p.queue[:rest]
		p.mu.Unlock()
		p.send(batch)
	}
}

// send runs the calls of batch whose context is alive, in one pipeline.
func (p *pipeliner) send(batch []*call) {
	live := batch[:0]
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.cmd.SetErr(err)
			close(c.done)
			continue
		}
		live = append(live, c)
	}
	switch len(live) {
	case 0:
		return
	case 1:
		_ = p.c.Process(context.WithoutCancel(live[0].ctx), live[0].cmd)
	default:
		pipe := p.c.Pipeline()
		for _, c := range live {
			_ = pipe.Process(c.ctx, c.cmd)
		}
		// The calls wait on their own contexts; the pipeline reads every
		// answer, so that the connection stays in step.
		_, _ = pipe.Exec(context.WithoutCancel(live[0].ctx))
	}
	for _, c := range live {
		close(c.done)
	}
}
