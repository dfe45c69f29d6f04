package stock

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// NodeCalls is one Redis master's count of script calls.
type NodeCalls struct {
	Addr  string `json:"addr"`
	Calls int64  `json:"calls"`
}

// ScriptCalls returns, for every master of rdb (the one server of a plain
// client), its EVALSHA and EVAL calls since its statistics were last reset
// (INFO commandstats), by address. A sale of buckets spreads its grab
// scripts over a Cluster's masters: the difference of two readings shows
// each one's share.
func ScriptCalls(ctx context.Context, rdb redis.UniversalClient) ([]NodeCalls, error) {
	var mu sync.Mutex // ForEachMaster calls in parallel
	var out []NodeCalls
	read := func(ctx context.Context, node *redis.Client) error {
		info, err := node.InfoMap(ctx, "commandstats").Result()
		if err != nil {
			return err
		}
		var n int64
		for _, cmd := range []string{"cmdstat_evalsha", "cmdstat_eval"} {
			for _, f := range strings.Split(info["Commandstats"][cmd], ",") {
				if v, ok := strings.CutPrefix(f, "calls="); ok {
					c, _ := strconv.ParseInt(v, 10, 64)
					n += c
				}
			}
		}
		mu.Lock()
		defer mu.Unlock()
		out = append(out, NodeCalls{Addr: node.Options().Addr, Calls: n})
		return nil
	}
	var err error
	switch r := rdb.(type) {
	case *redis.ClusterClient:
		err = r.ForEachMaster(ctx, read)
	case *redis.Client:
		err = read(ctx, r)
	}
	slices.SortFunc(out, func(a, b NodeCalls) int { return strings.Compare(a.Addr, b.Addr) })
	return out, err
}
