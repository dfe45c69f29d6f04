package compare_test

import (
	"context"
	"log"
	"os"

	"github.com/seckilldev/seckill/compare"
)

// The table of `seckill bench --compare`: every strategy, on a temporary
// SQLite database and the local Redis, with the default crowd.
func ExampleRun() {
	table, err := compare.Run(context.Background(), compare.Config{})
	if err != nil {
		log.Fatal(err)
	}
	if err := table.Write(os.Stdout); err != nil {
		log.Fatal(err)
	}
}
