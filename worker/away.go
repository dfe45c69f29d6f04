package worker

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// A stream whose Redis node fails (a read or a claim of it errs, or a
// batch's compensation or acknowledgement gives up: see redisPatience) is
// set away: it leaves the rounds, claims, trims and retirement, so that a
// dead or hung node, and the client's retries on it, cost the streams of
// the other nodes nothing. One goroutine probes the away streams every
// probeEvery, each with a command that goes where the stream's own go
// (XLEN of its key), and hands back those whose node answers; they then
// read this consumer's own pending entries first: what the failed step
// left pending is written again (every step of a batch is idempotent) and
// acknowledged.
const (
	probeEvery = 250 * time.Millisecond
	// redisPatience bounds the retries of a batch's Redis steps, which
	// come after its commit: past it the entries stay pending, the stream
	// goes away, and the batch is done again once its node answers.
	redisPatience = 2 * time.Second
)

// prober holds the away streams and probes them.
type prober struct {
	rdb   redis.UniversalClient
	kick  chan struct{} // a stream went away
	ready chan struct{} // a stream came back: see takeBack
	mu    sync.Mutex
	away  map[streamID]string // -> stream key
	back  []streamID
}

func newProber(rdb redis.UniversalClient) *prober {
	return &prober{rdb: rdb, kick: make(chan struct{}, 1), ready: make(chan struct{}, 1), away: map[streamID]string{}}
}

// leave sets s away (the caller owns s: the Run loop).
func (p *prober) leave(s *stream) {
	s.away, s.hot, s.start = true, false, "0"
	p.mu.Lock()
	p.away[s.id] = s.key
	p.mu.Unlock()
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// takeBack returns the streams that answered since the last call.
func (p *prober) takeBack() []streamID {
	p.mu.Lock()
	defer p.mu.Unlock()
	back := p.back
	p.back = nil
	return back
}

// forget drops a stream that is no longer consumed.
func (p *prober) forget(id streamID) {
	p.mu.Lock()
	delete(p.away, id)
	p.mu.Unlock()
}

// run probes until ctx ends.
func (p *prober) run(ctx context.Context) {
	t := time.NewTicker(probeEvery)
	defer t.Stop()
	for {
		p.mu.Lock()
		idle := len(p.away) == 0
		p.mu.Unlock()
		if idle {
			select {
			case <-ctx.Done():
				return
			case <-p.kick:
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p.probe(ctx)
	}
}

// probe asks each away stream's node once, in one pipeline.
func (p *prober) probe(ctx context.Context) {
	p.mu.Lock()
	ids := make([]streamID, 0, len(p.away))
	pipe := p.rdb.Pipeline()
	var cmds []*redis.IntCmd
	for id, key := range p.away {
		ids = append(ids, id)
		cmds = append(cmds, pipe.XLen(ctx, key))
	}
	p.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	_, _ = pipe.Exec(ctx)
	var back []streamID
	failed := false
	for i, c := range cmds {
		if c.Err() == nil {
			back = append(back, ids[i])
		} else {
			failed = true
		}
	}
	if c, ok := p.rdb.(*redis.ClusterClient); ok && failed {
		// A promoted replica serves the slots now: learn it without
		// waiting for the client's periodic reload (a single reload runs
		// at a time, whoever asks).
		c.ReloadState(ctx)
	}
	if len(back) == 0 {
		return
	}
	p.mu.Lock()
	for _, id := range back {
		if _, ok := p.away[id]; ok {
			delete(p.away, id)
			p.back = append(p.back, id)
		}
	}
	p.mu.Unlock()
	select {
	case p.ready <- struct{}{}:
	default:
	}
}
