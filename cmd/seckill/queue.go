package main

import (
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/lock"
	"github.com/seckilldev/seckill/queue"
	"github.com/seckilldev/seckill/stock"
)

// queueFlags configures the waiting rooms of the sales that have one.
type queueFlags struct {
	key        string        // --queue-key
	work       int           // --queue-work-bits
	holdWindow time.Duration // --queue-hold-window
}

func (f *queueFlags) register(fs flagSet) {
	fs.IntVar(&f.work, "queue-work-bits", 0, "joining a waiting room takes a proof of work of about 2^N SHA-256 hashes (0 to 32; 0: none): minting tickets for many accounts costs CPU")
	fs.DurationVar(&f.holdWindow, "queue-hold-window", queue.DefaultHoldWindow, "how long a buyer admitted and not yet bought counts against a waiting room's hold: after it, the buyer is taken for gone and the place goes to the next in line (1s to 10m)")
	fs.StringVar(&f.key, "queue-key", "", "the secret (at least 32 bytes) that signs the waiting rooms' tickets and passes: the same on every instance (default: a random key, for one instance only)")
}

// check refuses bad flags before anything starts.
func (f *queueFlags) check() error {
	if f.work < 0 || f.work > 32 {
		return usagef("--queue-work-bits: %d is not between 0 and 32", f.work)
	}
	if f.holdWindow != 0 && (f.holdWindow < time.Second || f.holdWindow > 10*time.Minute) { // 0: the room's default
		return usagef("--queue-hold-window: %v is not between 1s and 10m", f.holdWindow)
	}
	if f.key != "" && len(f.key) < 32 {
		return usagef("--queue-key: %d bytes, want at least 32", len(f.key))
	}
	return nil
}

// newRoom returns the waiting rooms over the backends' Redis (f checked),
// signing with --queue-key, or a key made for this process.
func newRoom(f *queueFlags, bk *backends, prefix string, log *slog.Logger) (*queue.Room, error) {
	key := []byte(f.key)
	if f.key == "" {
		key = make([]byte, 32)
		_, _ = rand.Read(key)
		log.Info("waiting rooms: tickets and passes are signed with a key made for this process; give every instance the same --queue-key")
	}
	return queue.New(bk.rdb, queue.Config{Key: key, Prefix: prefix, Log: log, WorkBits: f.work, HoldWindow: f.holdWindow})
}

// startRoom runs the room's refresh and, while this process leads, its
// admitter, until ctx ends; wg waits for them.
func startRoom(ctx context.Context, wg *sync.WaitGroup, room *queue.Room, bk *backends, locks *lock.Client) {
	wg.Go(func() { _ = room.Watch(ctx) })
	sales := &queueSales{bk: bk}
	adm := room.NewAdmitter(sales, 0)
	wg.Go(func() { _ = adm.Run(ctx, locks, func() []queue.Sale { return sales.live(ctx) }) })
}

// queueSales lists the live sales that have a waiting room, from the
// database at most once a second, and tells the admitter their stock left.
type queueSales struct {
	bk    *backends
	at    time.Time
	sales []queue.Sale
	acts  map[int64]seckill.Activity
}

func (q *queueSales) live(ctx context.Context) []queue.Sale {
	if time.Since(q.at) < time.Second {
		return q.sales
	}
	acts, err := q.bk.store.Activities(ctx, time.Now())
	if err != nil {
		return q.sales // the last list, until the database answers
	}
	q.at, q.sales, q.acts = time.Now(), nil, map[int64]seckill.Activity{}
	for _, a := range acts {
		if a.QueueRate > 0 {
			q.sales = append(q.sales, queue.SaleOf(a))
			q.acts[a.ID] = a
		}
	}
	return q.sales
}

// Remaining is the admitter's queue.Stock: the stock left in Redis; while
// Redis does not hold the sale yet (no one has grabbed: before the start,
// or before the first buyer is admitted), the database's, which the first
// grab loads.
func (q *queueSales) Remaining(ctx context.Context, id int64) (int64, error) {
	a := q.acts[id]
	n, err := q.bk.engine.Remaining(ctx, a)
	if errors.Is(err, stock.ErrNotLoaded) {
		return a.Remaining, nil
	}
	return n, err
}
