package sale

import (
	"time"

	"github.com/seckilldev/seckill/idgen"
)

func orderTime(oid int64) time.Time { return idgen.Time(oid) }
