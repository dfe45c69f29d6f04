module github.com/seckilldev/seckill/lock/tests

go 1.26.0

require (
	github.com/alicebob/miniredis/v2 v2.40.0
	github.com/anishathalye/porcupine v1.3.1
	github.com/bsm/redislock v0.9.4
	github.com/go-redsync/redsync/v4 v4.18.1
	github.com/redis/go-redis/v9 v9.23.0
	github.com/redis/rueidis v1.0.79
	github.com/seckilldev/seckill/internal/testenv v0.0.0-00010101000000-000000000000
	github.com/seckilldev/seckill/lock v0.1.0
	github.com/seckilldev/seckill/lock/goredis v0.1.0
	github.com/seckilldev/seckill/lock/rueidislock v0.1.0
	modernc.org/sqlite v1.62.0
)

require (
	filippo.io/edwards25519 v1.2.0 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dustin/go-humanize v1.1.0 // indirect
	github.com/go-sql-driver/mysql v1.10.1 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/pgx/v5 v5.12.0 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/mattn/go-isatty v0.0.24 // indirect
	github.com/ncruces/go-strftime v1.1.0 // indirect
	github.com/remyoudompheng/bigfft v0.0.0-20230129092748-24d4a6f8daec // indirect
	github.com/yuin/gopher-lua v1.1.1 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.41.0 // indirect
	modernc.org/libc v1.80.1 // indirect
	modernc.org/mathutil v1.7.1 // indirect
	modernc.org/memory v1.12.1 // indirect
)

// The lock's tests and benchmarks: a module of their own, so that the
// lock's go.mod lists nothing it does not need. The test helpers are
// seckill's, a module of their own too, so that the tests do not depend on
// the application.
replace (
	github.com/seckilldev/seckill/internal/testenv => ../../internal/testenv
	github.com/seckilldev/seckill/lock => ../
	github.com/seckilldev/seckill/lock/goredis => ../goredis
	github.com/seckilldev/seckill/lock/rueidislock => ../rueidislock
)
