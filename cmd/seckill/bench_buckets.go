package main

import (
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/seckilldev/seckill/stock"
)

// skewedCrowd returns users users of whom the share skew is homed in
// buckets 0 and 1 of a sale of n buckets and the others in the rest,
// shuffled: the crowd that makes buckets borrow (see stock.Home).
func skewedCrowd(users, n int, skew float64, seed uint64) []int64 {
	hotWant := int(float64(users) * skew)
	coldWant := users - hotWant
	hot, cold := make([]int64, 0, hotWant), make([]int64, 0, coldWant)
	for uid := int64(1); len(hot) < hotWant || len(cold) < coldWant; uid++ {
		switch h := stock.Home(uid, n); {
		case h < 2 && len(hot) < hotWant:
			hot = append(hot, uid)
		case h >= 2 && len(cold) < coldWant:
			cold = append(cold, uid)
		}
	}
	ids := append(hot, cold...)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	return ids
}

// callsDuring returns after - before, master by master (the masters of
// before that after still has).
func callsDuring(before, after []stock.NodeCalls) []stock.NodeCalls {
	var out []stock.NodeCalls
	for _, a := range after {
		if i := slices.IndexFunc(before, func(b stock.NodeCalls) bool { return b.Addr == a.Addr }); i >= 0 {
			out = append(out, stock.NodeCalls{Addr: a.Addr, Calls: a.Calls - before[i].Calls})
		}
	}
	return out
}

// writeMasterCalls prints each master's share of the run's script calls.
func writeMasterCalls(w io.Writer, calls []stock.NodeCalls) {
	var total int64
	for _, c := range calls {
		total += c.Calls
	}
	parts := make([]string, len(calls))
	for i, c := range calls {
		parts[i] = fmt.Sprintf("%s %d (%.0f%%)", c.Addr, c.Calls, 100*float64(c.Calls)/float64(max(total, 1)))
	}
	fmt.Fprintf(w, "script calls per master  %s\n", strings.Join(parts, ", "))
}
