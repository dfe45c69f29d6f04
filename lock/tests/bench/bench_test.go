package bench

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckilldev/seckill/internal/testenv"
)

// The benchmarks need the Redis at SECKILL_TEST_REDIS (default
// 127.0.0.1:6379), and skip without it. They run every locker with 64
// goroutines (b.SetParallelism over GOMAXPROCS); compare their ns/op in one
// run, or use cmd/lockbench, which alternates the lockers and prints ratios.
func newLocker(b *testing.B, name string) *Locker {
	l, err := New(name, testenv.RedisAddr(b), "bench:"+strconv.FormatInt(time.Now().UnixNano(), 36)+":"+name+":", 64)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(l.Close)
	return l
}

func parallelism(b *testing.B) {
	b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
}

// BenchmarkUncontended: lock+unlock cycles, each goroutine on its own key.
func BenchmarkUncontended(b *testing.B) {
	for _, name := range All {
		b.Run(name, func(b *testing.B) {
			l := newLocker(b, name)
			ctx := context.Background()
			var id atomic.Int64
			parallelism(b)
			cmds := l.Commands()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				key := "u" + strconv.FormatInt(id.Add(1), 10)
				for pb.Next() {
					unlock, err := l.Lock(ctx, key, false)
					if err != nil {
						b.Error(err)
						return
					}
					if err := unlock(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(l.Commands()-cmds)/float64(b.N), "cmds/op")
		})
	}
}

// BenchmarkContended: all goroutines on one key, 1 ms critical section.
func BenchmarkContended(b *testing.B) {
	for _, name := range All {
		b.Run(name, func(b *testing.B) {
			l := newLocker(b, name)
			ctx := context.Background()
			parallelism(b)
			cmds := l.Commands()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					unlock, err := l.Lock(ctx, "hot", true)
					if err != nil {
						b.Error(err)
						return
					}
					time.Sleep(time.Millisecond)
					if err := unlock(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(l.Commands()-cmds)/float64(b.N), "cmds/op")
		})
	}
}
