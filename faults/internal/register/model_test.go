package register

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// op is a critical section of client c from call to ret (in ms).
func op(c int, call, ret int64, read int64, wrote bool) Op {
	return Op{Client: c, Call: call * int64(time.Millisecond), Return: ret * int64(time.Millisecond), Read: read, Wrote: wrote}
}

// TestModelControls: the checker accepts histories that mutual exclusion
// allows and rejects the ones a broken lock makes.
func TestModelControls(t *testing.T) {
	cases := []struct {
		name  string
		ops   []Op
		final int64
		want  porcupine.CheckResult
		ok    bool
	}{
		{"one at a time", []Op{op(0, 0, 1, 0, true), op(1, 2, 3, 1, true), op(2, 4, 5, 2, true), op(0, 6, 7, 3, true)}, 4, porcupine.Ok, true},
		{"concurrent calls, serialized by the lock", []Op{op(0, 0, 10, 0, true), op(1, 0, 10, 1, true), op(2, 0, 10, 2, true)}, 3, porcupine.Ok, true},
		{"stale write refused by the fence", []Op{op(0, 0, 50, 0, false), op(1, 10, 20, 0, true), op(2, 30, 40, 1, true)}, 2, porcupine.Ok, true},
		// The broken lock: two holders read 0 and both write 1.
		{"two holders at once", []Op{op(0, 0, 10, 0, true), op(1, 2, 8, 0, true)}, 1, porcupine.Illegal, false},
		// A stale holder's write lands after others' writes.
		{"paused holder overwrites", []Op{op(0, 0, 50, 0, true), op(1, 10, 20, 0, true), op(2, 30, 40, 1, true), op(1, 60, 70, 1, true)}, 2, porcupine.Illegal, false},
		// Real time: a critical section that began after another ended must see its write.
		{"read of an overwritten value", []Op{op(0, 0, 1, 0, true), op(1, 2, 3, 0, true)}, 1, porcupine.Illegal, false},
		{"value never written", []Op{op(0, 0, 1, 0, true), op(1, 2, 3, 5, true)}, 2, porcupine.Illegal, false},
	}
	for _, c := range cases {
		v := Check(c.ops, c.final, 10*time.Second)
		if v.Linearizable != c.want || v.OK() != c.ok {
			t.Errorf("%s: got %s (ok %t, %+v), want %s (ok %t)", c.name, v.Linearizable, v.OK(), v, c.want, c.ok)
		}
	}
}
