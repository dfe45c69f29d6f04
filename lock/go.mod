module github.com/seckilldev/seckill/lock

go 1.25.0
