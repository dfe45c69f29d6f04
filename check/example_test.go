package check_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckilldev/seckill/check"
	"github.com/seckilldev/seckill/loadgen"
)

// After a load run: wait for the order worker to drain the activity's
// stream, then check every invariant against what the crowd was told.
func ExampleRun() {
	ctx := context.Background()
	const activity = 42
	rep, err := loadgen.Run(ctx, loadgen.Config{URL: "http://127.0.0.1:8080", ActivityID: activity, Users: 10000})
	if err != nil {
		log.Fatal(err)
	}

	db, err := check.Open(ctx, "postgres://postgres@127.0.0.1:5432/seckill?sslmode=disable")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()

	if err := check.WaitDrained(ctx, rdb, "seckill", activity, 30*time.Second); err != nil {
		fmt.Println(err) // the checker will report the pending orders
	}
	res, err := check.Run(ctx, check.Config{
		DB: db, Redis: rdb, Prefix: "seckill", ActivityID: activity,
		Answers: &check.Answers{ByUser: rep.OrdersByUser(), Uncertain: rep.UncertainUsers()},
	})
	if err != nil {
		log.Fatal(err)
	}
	_ = res.WriteTable(os.Stdout)
	if !res.OK() {
		os.Exit(1)
	}
}
