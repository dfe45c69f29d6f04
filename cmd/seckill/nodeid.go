package main

import (
	"context"
	"fmt"

	"github.com/seckilldev/seckill/idgen"
)

// nodeIDs returns the order id generator of this process.
func nodeIDs(ctx context.Context, bk *backends) (*idgen.Generator, error) {
	n, err := bk.rdb.Incr(ctx, bk.engine.Prefix()+":nodes").Result()
	if err != nil {
		return nil, fmt.Errorf("take a node id: %w", err)
	}
	return idgen.New((n - 1) % (idgen.MaxNode + 1)), nil
}
