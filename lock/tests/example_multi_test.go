package tests

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill/lock"
	"github.com/seckilldev/seckill/lock/goredis"
)

// Moving stock between two warehouses needs both of their locks. The names
// may come in any order: the multi-lock takes them in its own, so two moves
// in opposite directions never deadlock.
func ExampleClient_MultiLock() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locks := lock.New(goredis.New(rdb), lock.WithPrefix(examplePrefix))
	defer locks.Close()
	ctx := context.Background()

	m := locks.MultiLock("warehouse:7", "warehouse:3")
	fmt.Println("taken in order:", m.Names())
	h, err := m.Lock(ctx)
	if err != nil {
		fmt.Println("busy:", err)
		return
	}
	tokens := h.Tokens() // fence each warehouse with its own token
	fmt.Println("a token each:", tokens["warehouse:3"] > 0 && tokens["warehouse:7"] > 0)

	// all or none: with warehouse:7 held, a TryLock takes neither
	_, err = locks.MultiLock("warehouse:1", "warehouse:7").TryLock(ctx)
	fmt.Println("try:", errors.Is(err, lock.ErrNotObtained))
	held, _ := locks.IsLocked(ctx, "warehouse:1")
	fmt.Println("warehouse:1 held:", held)

	fmt.Println("unlock:", h.Unlock(ctx))
	// Output:
	// taken in order: [warehouse:3 warehouse:7]
	// a token each: true
	// try: true
	// warehouse:1 held: false
	// unlock: <nil>
}

// Do holds the lock for as long as fn runs; fn's context ends if the lock
// is lost, and Do's error says so.
func ExampleClient_Do() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locks := lock.New(goredis.New(rdb), lock.WithPrefix(examplePrefix))
	defer locks.Close()
	ctx := context.Background()

	err := locks.Do(ctx, "nightly-report", func(ctx context.Context) error {
		held, _ := locks.IsLocked(ctx, "nightly-report")
		fmt.Println("held while fn runs:", held)
		return nil
	})
	fmt.Println("Do:", err)
	held, _ := locks.IsLocked(ctx, "nightly-report")
	fmt.Println("held after:", held)
	// Output:
	// held while fn runs: true
	// Do: <nil>
	// held after: false
}

// Three workers count a latch down; the coordinator's Await returns once
// all three did, woken by the last CountDown, not by polling.
func ExampleClient_Latch() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locks := lock.New(goredis.New(rdb), lock.WithPrefix(examplePrefix))
	defer locks.Close()
	ctx := context.Background()

	ready := locks.Latch("shards-loaded")
	ok, _ := ready.TrySetCount(ctx, 3)
	fmt.Println("set:", ok)
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() { ready.CountDown(ctx) }) // each worker, once its shard is loaded
	}
	fmt.Println("await:", ready.Await(ctx))
	n, _ := ready.Count(ctx)
	fmt.Println("count:", n)
	wg.Wait()
	// Output:
	// set: true
	// await: <nil>
	// count: 0
}
