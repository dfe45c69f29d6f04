package loadgen_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"github.com/seckilldev/seckill/loadgen"
)

// A crowd of 1000 users, a fifth of whose clicks are repeats, against the
// baseline handler (which accepts everything).
func ExampleRun() {
	srv := httptest.NewServer(http.HandlerFunc(loadgen.BaselineHandler))
	defer srv.Close()

	rep, err := loadgen.Run(context.Background(), loadgen.Config{
		URL:         srv.URL,
		ActivityID:  42,
		Users:       1000,
		RepeatShare: 0.2,
		Concurrency: 16,
		Duration:    10 * time.Second, // a safety bound: 1250 requests take far less
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("requests:", rep.Requests, "accepted:", rep.Counts.Accepted)
	fmt.Println("users with an order:", len(rep.OrdersByUser()))
	// rep.WriteTable(os.Stdout) prints the whole report; json.Marshal(rep) too.
	// Output:
	// requests: 1250 accepted: 1250
	// users with an order: 1000
}

// The bench measures the baseline with the same settings as the sale and
// reports the sale's throughput as a share of it.
func ExampleMeasureBaseline() {
	sale := httptest.NewServer(http.HandlerFunc(loadgen.BaselineHandler)) // stands in for the service
	defer sale.Close()
	baseline := httptest.NewServer(http.HandlerFunc(loadgen.BaselineHandler)) // a process of its own in the bench
	defer baseline.Close()

	cfg := loadgen.Config{URL: sale.URL, ActivityID: 42, Users: 2000, Concurrency: 8,
		Progress: loadgen.ProgressWriter(os.Stderr)}
	grab, err := loadgen.Run(context.Background(), cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	base, err := loadgen.MeasureBaseline(context.Background(), cfg, baseline.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	ratio := loadgen.Ratio(grab, base)
	fmt.Println(ratio > 0)
	// Output: true
}
