package stock

import "strconv"

// DefaultPrefix is the key namespace when none is configured.
const DefaultPrefix = "seckill"

// Keys names the Redis keys of one activity. Every key carries the hash tag
// {a<id>}, so one script can touch all of them on Redis Cluster.
type Keys struct {
	Meta   string // hash: stock, starts_ms, ends_ms, seq (the last local order id issued), epoch (moves when the buyers change while sold out)
	Stock  string // string: remaining stock
	Buyers string // hash: <user id> -> <local order id> (see seckill.OrderID)
	Orders string // stream: one entry per accepted grab: o=<local order id> u=<user id>, under the entry id EntryID gives; its milliseconds are the grab's time
	Debt   string // string: units owed after a reconciliation found no stock (see scripts/reconcile.lua)
	Awake  string // string: set while a worker is known to be reading Orders; its absence makes grab.lua wake the workers
	// Returned is a set: the receipts of the units of cancelled and
	// expired orders that Redis got back (see scripts/return.lua).
	Returned string
}

// KeysFor returns the keys of activity id under prefix ("" means DefaultPrefix).
func KeysFor(prefix string, id int64) Keys {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	base := prefix + ":{a" + strconv.FormatInt(id, 10) + "}:"
	return Keys{Meta: base + "meta", Stock: base + "stock", Buyers: base + "buyers", Orders: base + "orders", Debt: base + "debt",
		Awake: base + "awake", Returned: base + "returned"}
}
