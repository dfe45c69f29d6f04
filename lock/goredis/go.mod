module github.com/seckilldev/seckill/lock/goredis

go 1.26.0

require (
	github.com/redis/go-redis/v9 v9.23.0
	github.com/seckilldev/seckill/lock v0.1.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)

// The lock and this adapter live in one repository; a release tags both.
replace github.com/seckilldev/seckill/lock => ../
