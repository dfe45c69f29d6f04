package tests

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/lock/goredis"
)

// gate holds up the go-redis client's calls while closed, and records the
// size of every pipeline and single call it lets through.
type gate struct {
	mu      sync.Mutex
	open    chan struct{}
	held    atomic.Int64 // calls waiting at the gate
	batches []int
	sent    []string // the first argument after the script of each call sent
}

// noticing counts, once, that a call waits on it.
type noticing struct {
	context.Context
	n    *atomic.Int64
	once sync.Once
}

func (c *noticing) Done() <-chan struct{} {
	c.once.Do(func() { c.n.Add(1) })
	return c.Context.Done()
}

func newGate() *gate { return &gate{open: make(chan struct{})} }

func (g *gate) wait(ctx context.Context, cmds []redis.Cmder) {
	g.held.Add(1)
	<-g.open
	g.held.Add(-1)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.batches = append(g.batches, len(cmds))
	for _, c := range cmds {
		if a := c.Args(); len(a) > 4 {
			g.sent = append(g.sent, a[4].(string))
		}
	}
}

func (g *gate) DialHook(next redis.DialHook) redis.DialHook { return next }
func (g *gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		g.wait(ctx, []redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}
func (g *gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		g.wait(ctx, cmds)
		return next(ctx, cmds)
	}
}

// TestGoRedisPipelining: the go-redis adapter sends the calls that come
// while its pipelines are on their way together, in the next pipeline; a
// call whose context ends while it waits in the queue is never sent, and
// one whose context ends on its way returns at once, its answer dropped,
// the connection fine for the next calls (-race checks that nobody reads
// the answer being written).
func TestGoRedisPipelining(t *testing.T) {
	addr := testenv.RedisAddr(t)
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	g := newGate()
	c.AddHook(g)
	r := goredis.New(c)
	key := testenv.Prefix(t) + ":pipe"
	const echo = "return ARGV[1]" // returns its argument, as a number
	ctx := ctxTimeout(t, 30*time.Second)

	type answer struct {
		n   int64
		err error
	}
	call := func(ctx context.Context, i int) <-chan answer {
		ch := make(chan answer, 1)
		go func() {
			n, err := r.Eval(ctx, echo, []string{key}, []string{strconv.Itoa(i)})
			ch <- answer{n, err}
		}()
		return ch
	}
	// Four calls take the four flusher slots and wait at the gate, one
	// after the other: each pipeline holds one.
	var first []<-chan answer
	for i := range 4 {
		first = append(first, call(ctx, i))
		waitFor(t, 10*time.Second, "a call at the gate", func() bool { return g.held.Load() == int64(i+1) })
	}
	// 20 more queue behind them; one of them gives up while queued. A
	// queued call waits on its context: that tells it has queued.
	quit, cancel := context.WithCancel(ctx)
	var queued []<-chan answer
	var waiting atomic.Int64
	for i := range 20 {
		cctx := ctx
		if i == 7 {
			cctx = quit
		}
		queued = append(queued, call(&noticing{Context: cctx, n: &waiting}, 100+i))
	}
	waitFor(t, 10*time.Second, "20 calls queued", func() bool { return waiting.Load() == 20 })
	if h := g.held.Load(); h != 4 {
		t.Fatalf("%d calls at the gate with 4 flushers busy, want 4", h)
	}
	cancel()
	if a := <-queued[7]; !errors.Is(a.err, context.Canceled) {
		t.Fatalf("a queued call whose context ended: %v, want context.Canceled", a.err)
	}
	close(g.open)
	for i, ch := range first {
		if a := <-ch; a.err != nil || a.n != int64(i) {
			t.Fatalf("call %d: %d, %v", i, a.n, a.err)
		}
	}
	for i, ch := range queued {
		if i == 7 {
			continue
		}
		if a := <-ch; a.err != nil || a.n != int64(100+i) {
			t.Fatalf("queued call %d: %d, %v", i, a.n, a.err)
		}
	}
	g.mu.Lock()
	largest := 0
	for _, b := range g.batches {
		largest = max(largest, b)
	}
	for _, s := range g.sent {
		if s == "107" {
			t.Error("the call whose context ended in the queue was sent")
		}
	}
	g.mu.Unlock()
	// The 19 live queued calls go in the pipelines of the slots as they
	// free: at least one of them carries several.
	if largest < 2 {
		t.Fatalf("largest pipeline %d calls: the queued calls went one by one", largest)
	}
	t.Logf("pipelines: %v", g.batches)

	// A call whose context ends on its way returns at once; the next calls
	// get their own answers.
	g.open = make(chan struct{})
	slow, cancelSlow := context.WithCancel(ctx)
	ch := call(slow, 1)
	waitFor(t, 10*time.Second, "the call at the gate", func() bool { return g.held.Load() == 1 })
	cancelSlow()
	if a := <-ch; !errors.Is(a.err, context.Canceled) {
		t.Fatalf("a call whose context ended on its way: %v, want context.Canceled", a.err)
	}
	close(g.open)
	for i := range 10 {
		if a := <-call(ctx, 1000+i); a.err != nil || a.n != int64(1000+i) {
			t.Fatalf("call after the dropped answer: %d, %v", a.n, a.err)
		}
	}
}
