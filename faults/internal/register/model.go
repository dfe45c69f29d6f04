package register

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/anishathalye/porcupine"
)

// Model is the critical section as porcupine sees it: an atomic "read v,
// write v+1" on a register that starts at 0. An operation whose write was
// refused (fenced) reads without writing.
var Model = porcupine.Model{
	Init: func() any { return int64(0) },
	Step: func(state, _, output any) (bool, any) {
		v := state.(int64)
		op := output.(Op)
		if op.Read != v {
			return false, v
		}
		if op.Wrote {
			return true, v + 1
		}
		return true, v
	},
	DescribeOperation: func(_, output any) string {
		op := output.(Op)
		if op.Wrote {
			return fmt.Sprintf("read %d, wrote %d (token %d)", op.Read, op.Read+1, op.Token)
		}
		return fmt.Sprintf("read %d, write refused (token %d)", op.Read, op.Token)
	},
	DescribeState: func(state any) string { return fmt.Sprint(state) },
}

// MaxClients bounds the clients of a checked history: beyond 16 porcupine
// may not finish in reasonable time (see the field notes).
const MaxClients = 16

// Verdict is the outcome of checking a history.
type Verdict struct {
	Ops     int
	Clients int
	Writes  int   // operations whose write took effect
	Refused int   // operations whose write the fencing check refused
	Final   int64 // the register's value at the end
	// Linearizable is porcupine's answer: Ok, Illegal, or Unknown (it ran
	// out of time).
	Linearizable porcupine.CheckResult
	// Overlaps counts the writing operations that read a value an earlier
	// writing operation had read: a holder that wrote after another holder
	// (a lost update), and every write built on its stale value.
	Overlaps int
}

// Lost is the number of writes that the register does not reflect.
func (v Verdict) Lost() int64 { return int64(v.Writes) - v.Final }

// OK reports mutual exclusion: a linearizable history and no lost update.
func (v Verdict) OK() bool {
	return v.Linearizable == porcupine.Ok && v.Lost() == 0 && v.Overlaps == 0
}

// Check checks a history against the register's final value.
func Check(ops []Op, final int64, timeout time.Duration) Verdict {
	v := Verdict{Ops: len(ops), Final: final}
	clients := map[int]bool{}
	reads := map[int64]int{}
	hist := make([]porcupine.Operation, len(ops))
	for i, op := range ops {
		clients[op.Client] = true
		if op.Wrote {
			v.Writes++
			reads[op.Read]++
		} else {
			v.Refused++
		}
		hist[i] = porcupine.Operation{ClientId: op.Client, Call: op.Call, Return: op.Return, Output: op}
	}
	for _, n := range reads {
		v.Overlaps += n - 1
	}
	v.Clients = len(clients)
	v.Linearizable = porcupine.CheckOperationsTimeout(Model, hist, timeout)
	return v
}

// WriteTable prints the verdict as the rows of the invariant table.
func (v Verdict) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	verdict := func(ok bool) string {
		if ok {
			return "ok"
		}
		return "FAILED"
	}
	fmt.Fprintf(tw, "CHECK\tRESULT\tCOUNT\tDETAIL\n")
	fmt.Fprintf(tw, "I6 mutual exclusion (linearizable)\t%s\t%d\t%d critical sections of %d clients: porcupine says %s\n",
		verdict(v.Linearizable == porcupine.Ok), v.Overlaps, v.Ops, v.Clients, v.Linearizable)
	fmt.Fprintf(tw, "I6 no lost update\t%s\t%d\t%d writes took effect, %d refused by the fencing check; register = %d\n",
		verdict(v.Lost() == 0), v.Lost(), v.Writes, v.Refused, v.Final)
	return tw.Flush()
}
