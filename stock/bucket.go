package stock

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/seckilldev/seckill"
)

// Buckets. Every key of an activity of one bucket carries the hash tag
// {a<id>}: one slot, so one Redis core takes every grab of the sale. An
// activity of n > 1 buckets (seckill.Activity.Buckets) has n sets of the
// same keys, bucket b's under a tag of its own (bucketTag) whose slot lies
// in the b-th n-th of the slot range: the buckets spread evenly over the
// slots, and so over the masters of a Cluster whose masters hold equal
// ranges of slots.
//
// Each user has one home bucket (Home), which holds their buyer mark and
// their order: "one order per user" stays one script on one slot. Each
// bucket issues its own order ids, those whose local part is b modulo n
// (see grab.lua), so ids stay unique in the activity and name their bucket
// (Bucket).
//
// The stock is split between the buckets at the load; a grab that finds
// its home bucket empty does not mean sold out. The combiner that ran it
// then moves units from another bucket (borrow.go) and runs it again, and
// answers sold out only when every bucket is empty, which it proves with
// the transfer counters every bucket keeps.

// clusterSlots is the number of Redis Cluster hash slots.
const clusterSlots = 16384

// crcTable is CRC-16/XMODEM's table, the checksum of Redis Cluster's key
// slots (CLUSTER KEYSLOT).
var crcTable = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()

// slot returns the Cluster hash slot of the keys whose hash tag is tag.
func slot(tag string) int {
	var crc uint16
	for i := 0; i < len(tag); i++ {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^tag[i]]
	}
	return int(crc) % clusterSlots
}

// bucketTag returns the hash tag of bucket b of activity id's n: the first
// of "a<id>.<b>", "a<id>.<b>.1", "a<id>.<b>.2", ... whose slot lies in
// [b*16384/n, (b+1)*16384/n). About n tries find one.
func bucketTag(id int64, n, b int) string {
	lo, hi := b*clusterSlots/n, (b+1)*clusterSlots/n
	base := "a" + strconv.FormatInt(id, 10) + "." + strconv.Itoa(b)
	tag := base
	for i := 1; ; i++ {
		if s := slot(tag); s >= lo && s < hi {
			return tag
		}
		tag = base + "." + strconv.Itoa(i)
	}
}

// BucketKeys returns the keys of bucket b of activity id of n buckets
// under prefix. With n = 1 they are KeysFor's.
func BucketKeys(prefix string, id int64, n, b int) Keys {
	if n <= 1 {
		return KeysFor(prefix, id)
	}
	return keysUnder(prefix, bucketTag(id, n, b))
}

// Home returns user uid's home bucket among n: a mix of the id's bits, so
// that consecutive ids spread over the buckets.
func Home(uid int64, n int) int {
	if n <= 1 {
		return 0
	}
	// splitmix64's finalizer.
	x := uint64(uid)
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return int(x % uint64(n))
}

// Bucket returns the bucket that issued order oid of an activity of n
// buckets (see grab.lua).
func Bucket(oid int64, n int) int {
	if n <= 1 {
		return 0
	}
	return int(seckill.OrderLocal(oid) % int64(n))
}

// shards is what an engine keeps of one activity's buckets: their keys,
// and the last proof that the whole sale is sold out.
type shards struct {
	id   int64
	keys []Keys // by bucket
	// soldOutTill is when the last sold-out verdict (see borrow) stops
	// being trusted, in unix nanoseconds.
	soldOutTill atomic.Int64
}

// verdictFor is how long a sold-out verdict answers the grabs that find
// their home bucket empty without reading every bucket again. Units come
// back only through compensations, returns and reconciliations, each of
// which credits a bucket that its buyer's next grab finds; a grab homed
// elsewhere sees them after this long at most.
const verdictFor = 250 * time.Millisecond

func (s *shards) soldOut(now time.Time) bool { return now.UnixNano() < s.soldOutTill.Load() }

// shardsKey names a layout in Engine.layouts.
type shardsKey struct {
	id int64
	n  int
}

// maxLayouts bounds the layouts an engine keeps: past it they are
// forgotten, and computed again as grabs ask (a millisecond for 256
// buckets).
const maxLayouts = 4096

// layout returns the buckets of activity a, computed once per engine.
func (e *Engine) layout(a *seckill.Activity) *shards {
	k := shardsKey{a.ID, a.BucketCount()}
	e.layoutsMu.Lock()
	defer e.layoutsMu.Unlock()
	if s := e.layouts[k]; s != nil {
		return s
	}
	s := &shards{id: a.ID, keys: make([]Keys, k.n)}
	for b := range k.n {
		s.keys[b] = BucketKeys(e.cfg.Prefix, a.ID, k.n, b)
	}
	if len(e.layouts) >= maxLayouts {
		clear(e.layouts)
	}
	e.layouts[k] = s
	return s
}
