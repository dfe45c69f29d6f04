package stock

import "strconv"

// DefaultPrefix is the key namespace when none is configured.
const DefaultPrefix = "seckill"

// Keys names the Redis keys of one activity. Every key carries the hash tag
// {a<id>}, so one script can touch all of them on Redis Cluster.
type Keys struct {
	// Meta is a hash: stock, starts_ms, ends_ms, left (the remaining
	// stock: field MetaLeft), seq (the last local order id issued), epoch
	// (moves when the buyers change while sold out), awake (field
	// MetaAwake: set while a worker is known to be reading Orders; its
	// absence makes grab.lua wake the workers), and a bucket's transfer
	// counters in and out. One HMGET reads and one HSET writes what a
	// grab needs of it.
	Meta   string
	Buyers string // hash: <user id> -> <local order id> (see seckill.OrderID)
	Orders string // stream: one entry per accepted grab: o=<local order id> u=<user id>, under the entry id EntryID gives; its milliseconds are the grab's time
	Debt   string // string: units owed after a reconciliation found no stock (see scripts/reconcile.lua)
	// Returned is a set: the receipts of the units of cancelled and
	// expired orders that Redis got back (see scripts/return.lua).
	Returned string
	// Journal and Credits belong to the buckets of an activity of more
	// than one (see bucket.go). Journal is a hash: the transfers of units
	// out of this bucket not yet known to be credited, <transfer id> ->
	// "<to bucket>:<units>". Credits is a set: the ids of the transfers
	// credited to this bucket.
	Journal, Credits string
	// Layout is a string under the activity's own tag {a<id>} (the keys of
	// its one bucket, with one): the number of buckets of an activity of
	// several, set before its buckets are loaded and deleted after they
	// are retired. With Meta of the same tag it answers, in one command,
	// whether Redis holds anything of an activity whose layout the asker
	// does not know (Engine.Present).
	Layout string
	// legacyStock is where releases before the stock moved into Meta kept
	// the remaining stock (a string). load.lua moves it into Meta, and
	// retire.lua deletes it, so a sale Redis held across the upgrade
	// keeps its stock.
	legacyStock string
}

// The fields of Keys.Meta that other packages read or write.
const (
	MetaLeft  = "left"  // the remaining stock of the bucket
	MetaAwake = "awake" // set while a worker is known to be reading Orders
)

// KeysFor returns the keys of activity id under prefix ("" means
// DefaultPrefix), an activity of one bucket: every key carries the hash tag
// {a<id>}. BucketKeys names the keys of each bucket of an activity of more.
func KeysFor(prefix string, id int64) Keys {
	return keysUnder(prefix, "a"+strconv.FormatInt(id, 10))
}

// keysUnder returns the keys under prefix with hash tag tag.
func keysUnder(prefix, tag string) Keys {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	base := prefix + ":{" + tag + "}:"
	return Keys{Meta: base + "meta", Buyers: base + "buyers", Orders: base + "orders", Debt: base + "debt",
		Returned: base + "returned", Journal: base + "journal", Credits: base + "credits",
		Layout: base + "layout", legacyStock: base + "stock"}
}
