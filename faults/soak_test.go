package faults_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckilldev/seckill/faults/soak"
	"github.com/seckilldev/seckill/internal/testenv"
)

// logWriter sends each line written to it to t.Log.
type logWriter struct {
	mu sync.Mutex
	t  *testing.T
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestSoakShort is the soak's CI size: 20,000 grabs over two API instances
// and two workers, a fault every 1.5s (worker kill -9, API kill -9, worker
// SIGSTOP, in turn), then the drain, a clean SIGTERM of every process and
// every invariant. The long soak is the same function with larger numbers
// (see package soak).
func TestSoakShort(t *testing.T) {
	bin := binary(t)
	redisURL := "redis://" + testenv.RedisAddr(t)
	dbURL := testenv.PostgresURL(t)
	var out strings.Builder
	res, err := soak.Run(context.Background(), soak.Config{
		Binary: bin, RedisURL: redisURL, DBURL: dbURL, Prefix: testenv.Prefix(t),
		Requests: 20_000, APIs: 2, Workers: 2, Concurrency: 16, Rate: 2500,
		FaultEvery: 1500 * time.Millisecond, Batch: 50, Log: &logWriter{t: t}, Progress: -1,
	}, &out)
	t.Logf("soak:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range soak.AllFaults {
		if res.Faults[f] == 0 {
			t.Errorf("fault %s was not injected: %v", f, res.Faults)
		}
	}
}
