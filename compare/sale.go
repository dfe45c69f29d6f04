package compare

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync/atomic"

	"github.com/seckilldev/seckill"
)

// Sale is one strategy's fresh sale: its items, with their stock, in the
// database and Redis. It is the strategy's http.Handler: it serves
// POST /api/v1/activities/{id}/grab (id: ID) and GET /healthz.
type Sale struct {
	b        *Bench
	strategy string
	items    []item
	mux      *http.ServeMux
	grab     func(ctx context.Context, it *item, uid int64) (reply, error)
	pending  bool // orders are confirmed later (lua): replies say "pending"

	busy    atomic.Int64 // lock waits given up: answered 503
	fenced  atomic.Int64 // database writes refused for a stale fencing token
	expired atomic.Int64 // unlocks that found the lease gone
	failed  atomic.Int64 // internal errors: answered 500

	lua *luaSale
}

// item is one of the goods of a sale.
type item struct {
	id        int64 // compare_stock.id, or the service's activity id (lua)
	stock     int64
	keyStock  string           // remaining units in Redis
	keyBuyers string           // hash: user id -> order id
	act       seckill.Activity // lua only: the service's activity
}

// reply is a successful grab: the new order, or the user's existing one.
type reply struct {
	order int64
	new   bool
}

var (
	errSoldOut = errors.New("compare: sold out")
	errBusy    = errors.New("compare: busy, try again")
)

// Prepare makes a fresh sale for strategy: new items with the configured
// stock in the database and, for the strategies that use it, in Redis.
func (b *Bench) Prepare(ctx context.Context, strategy string) (*Sale, error) {
	if !slices.Contains(All, strategy) {
		return nil, fmt.Errorf("compare: unknown strategy %q", strategy)
	}
	s := &Sale{b: b, strategy: strategy}
	units := split(b.cfg.Stock, b.cfg.Items)
	if strategy == Lua {
		if err := s.prepareLua(ctx, units); err != nil {
			s.Close()
			return nil, err
		}
	} else {
		for _, n := range units {
			id, err := insertItem(ctx, b.db, b.d, strategy, n)
			if err != nil {
				return nil, fmt.Errorf("compare: create item: %w", err)
			}
			// One hash tag per item: a script over both keys would run on
			// Redis Cluster too.
			base := fmt.Sprintf("%s:{i%d}:", b.cfg.Prefix, id)
			it := item{id: id, stock: n, keyStock: base + "stock", keyBuyers: base + "buyers"}
			if strategy != DBOnly {
				if err := b.rdb.Set(ctx, it.keyStock, n, 0).Err(); err != nil {
					return nil, fmt.Errorf("compare: load item %d into redis: %w", id, err)
				}
			}
			s.items = append(s.items, it)
		}
	}
	switch strategy {
	case DBOnly:
		s.grab = s.grabDB
	case GlobalLock:
		s.grab = func(ctx context.Context, it *item, uid int64) (reply, error) {
			return s.grabLocked(ctx, it, uid, "seckill", false)
		}
	case ActivityLock:
		s.grab = func(ctx context.Context, it *item, uid int64) (reply, error) {
			return s.grabLocked(ctx, it, uid, "item:"+strconv.FormatInt(it.id, 10), true)
		}
	case UserLock:
		s.grab = s.grabUserLock
	case Naive:
		s.grab = s.grabNaive
	case Lua:
		s.grab = s.grabLua
		s.pending = true
	}
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("POST /api/v1/activities/{id}/grab", s.serveGrab)
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeBody(w, http.StatusOK, bodyHealthy)
	})
	return s, nil
}

// split divides units over n items as evenly as it goes.
func split(units int64, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = units / int64(n)
		if int64(i) < units%int64(n) {
			out[i]++
		}
	}
	return out
}

// ID is the sale's id in the grab URL (its first item's id).
func (s *Sale) ID() int64 { return s.items[0].id }

// Strategy returns the strategy the sale serves.
func (s *Sale) Strategy() string { return s.strategy }

// Close stops what the sale runs in the background (the lua strategy's
// order worker) and its stock engine. Its keys and rows stay until the
// Bench is closed.
func (s *Sale) Close() error {
	if s.lua != nil {
		return s.lua.close()
	}
	return nil
}

func (s *Sale) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Replies are written by hand, like the service's shapes, so that the
// handler costs the same for every strategy and little.
var (
	bodyHealthy = []byte(`{"status":"ok"}` + "\n")
	bodySoldOut = []byte(`{"error":{"code":"sold_out","message":"sold out"}}` + "\n")
	// A lock wait given up took nothing: the service's 503 unavailable.
	bodyBusy     = []byte(`{"error":{"code":"unavailable","message":"busy: the lock wait gave up, nothing was taken; try again"}}` + "\n")
	bodyNotFound = []byte(`{"error":{"code":"not_found","message":"no such sale"}}` + "\n")
	bodyBadUser  = []byte(`{"error":{"code":"invalid_argument","message":"X-User-ID must be a positive 64-bit integer"}}` + "\n")
	bodyInternal = []byte(`{"error":{"code":"internal","message":"internal error"}}` + "\n")
	jsonType     = []string{"application/json"}
	retryAfter   = []string{"1"}
)

func writeBody(w http.ResponseWriter, status int, body []byte) {
	w.Header()["Content-Type"] = jsonType
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func (s *Sale) serveGrab(w http.ResponseWriter, r *http.Request) {
	if id, ok := parsePositive(r.PathValue("id")); !ok || id != s.ID() {
		writeBody(w, http.StatusNotFound, bodyNotFound)
		return
	}
	uid, ok := parsePositive(r.Header.Get("X-User-ID"))
	if !ok {
		writeBody(w, http.StatusBadRequest, bodyBadUser)
		return
	}
	it := &s.items[uid%int64(len(s.items))]
	rep, err := s.grab(r.Context(), it, uid)
	switch {
	case err == nil:
		status := http.StatusAccepted
		if !rep.new {
			status = http.StatusOK
		}
		w.Header()["Content-Type"] = jsonType
		w.WriteHeader(status)
		state := "confirmed"
		if s.pending {
			state = "pending"
		}
		b := make([]byte, 0, 64)
		b = append(b, `{"order_id":"`...)
		b = strconv.AppendInt(b, rep.order, 10)
		b = append(b, `","status":"`...)
		b = append(b, state...)
		b = append(b, "\"}\n"...)
		_, _ = w.Write(b)
	case errors.Is(err, errSoldOut):
		writeBody(w, http.StatusConflict, bodySoldOut)
	case errors.Is(err, errBusy):
		w.Header()["Retry-After"] = retryAfter
		writeBody(w, http.StatusServiceUnavailable, bodyBusy)
	default:
		if s.failed.Add(1) <= 5 {
			s.b.cfg.Log.Error("grab failed", "strategy", s.strategy, "user", uid, "err", err)
		}
		writeBody(w, http.StatusInternalServerError, bodyInternal)
	}
}

// parsePositive accepts only the canonical decimal form of a positive
// int64, as the service does.
func parsePositive(v string) (int64, bool) {
	if v == "" || len(v) > 19 || v[0] == '0' {
		return 0, false
	}
	for i := range len(v) {
		if v[i] < '0' || v[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	return n, err == nil
}

// Tally is what a sale really sold, counted from the database and Redis
// after the crowd, whatever the users were told.
type Tally struct {
	Stock int64 `json:"stock"`
	// Sold counts the orders recorded: rows of compare_orders, or for the
	// lua strategy the orders its worker confirmed in the service's table.
	Sold int64 `json:"sold"`
	// Oversold sums, over the items, the orders beyond the item's stock.
	Oversold int64 `json:"oversold"`
	// Duplicates counts the users who hold more than one order.
	Duplicates int64 `json:"duplicates"`
	// Busy counts the lock waits given up (answered 503), Fenced the
	// database writes refused for a stale fencing token, Expired the
	// unlocks that found the lease gone, Failed the grabs answered 500.
	Busy    int64 `json:"busy"`
	Fenced  int64 `json:"fenced"`
	Expired int64 `json:"expired"`
	Failed  int64 `json:"failed"`
	// Notes say how the counts were made and what else was seen.
	Notes []string `json:"notes,omitempty"`
}

// Count counts what the sale sold. For the lua strategy it first waits
// until the worker has written every accepted grab to the database.
func (s *Sale) Count(ctx context.Context) (Tally, error) {
	t := Tally{Busy: s.busy.Load(), Fenced: s.fenced.Load(), Expired: s.expired.Load(), Failed: s.failed.Load()}
	for _, it := range s.items {
		t.Stock += it.stock
	}
	var err error
	if s.lua != nil {
		err = s.countLua(ctx, &t)
	} else {
		err = s.countSQL(ctx, &t)
	}
	if err != nil {
		return t, err
	}
	if t.Busy > 0 {
		t.Notes = append(t.Notes, fmt.Sprintf("%d lock waits over %s: busy (503)", t.Busy, s.b.cfg.LockWait))
	}
	if t.Fenced > 0 {
		t.Notes = append(t.Notes, fmt.Sprintf("%d writes refused by the fencing token", t.Fenced))
	}
	if t.Expired > 0 {
		t.Notes = append(t.Notes, fmt.Sprintf("%d leases ran out before unlock", t.Expired))
	}
	if t.Failed > 0 {
		t.Notes = append(t.Notes, fmt.Sprintf("%d grabs failed (500)", t.Failed))
	}
	return t, nil
}

// countSQL counts compare_orders per item, and compares with the stock
// left in the database and Redis.
func (s *Sale) countSQL(ctx context.Context, t *Tally) error {
	b := s.b
	var dbLeft, redisLeft int64
	for _, it := range s.items {
		var sold, users, dups, left, fence int64
		if err := b.db.QueryRowContext(ctx, b.d.q(qSold), it.id).Scan(&sold, &users); err != nil {
			return fmt.Errorf("compare: count orders of item %d: %w", it.id, err)
		}
		if err := b.db.QueryRowContext(ctx, b.d.q(qDupUsers), it.id).Scan(&dups); err != nil {
			return fmt.Errorf("compare: count duplicate buyers of item %d: %w", it.id, err)
		}
		if err := b.db.QueryRowContext(ctx, b.d.q(qItemState), it.id).Scan(&left, &fence); err != nil {
			return fmt.Errorf("compare: read item %d: %w", it.id, err)
		}
		t.Sold += sold
		t.Oversold += max(0, sold-it.stock)
		t.Duplicates += dups
		dbLeft += left
		if s.strategy != DBOnly {
			n, err := b.rdb.Get(ctx, it.keyStock).Int64()
			if err != nil {
				return fmt.Errorf("compare: read stock of item %d in redis: %w", it.id, err)
			}
			redisLeft += n
		}
	}
	if s.strategy == DBOnly {
		t.Notes = append(t.Notes, "counted in compare_orders; the row lock of UPDATE ... WHERE remaining > 0 serializes each item's buyers")
		return nil
	}
	t.Notes = append(t.Notes, fmt.Sprintf("counted in compare_orders; stock left: redis %d, db %d", redisLeft, dbLeft))
	if s.strategy == UserLock && t.Stock-redisLeft < t.Sold {
		t.Notes = append(t.Notes, fmt.Sprintf("lost updates: redis counts %d units sold for %d orders", t.Stock-redisLeft, t.Sold))
	}
	return nil
}
