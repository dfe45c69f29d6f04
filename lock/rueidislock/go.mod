module github.com/seckilldev/seckill/lock/rueidislock

go 1.25.0

require (
	github.com/redis/rueidis v1.0.79
	github.com/seckilldev/seckill/lock v0.1.0
)

require golang.org/x/sys v0.47.0 // indirect

// The lock and this adapter live in one repository; a release tags both.
replace github.com/seckilldev/seckill/lock => ../
