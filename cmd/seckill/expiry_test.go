package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/stock"
	"github.com/seckilldev/seckill/store"
)

// TestExpiryRace is issue 10's race, with processes, on each engine: 1,000
// orders whose buyers pay at the moment their deadline passes, while two
// `seckill worker` processes run the expiry job and the leader is
// SIGSTOPped just before the first deadline and resumed past its lease in
// the middle of the deadlines. Every buyer's answer must match the order's
// final state (paid, or expired), no paid order may have a returned unit,
// every unit must be accounted for (remaining = stock - paid, Redis
// agreeing once the job ran), the other worker must take over, and none
// of the stopped leader's writes may land after it was stopped: a write it
// attempts when resumed must be refused by the fence.
func TestExpiryRace(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs processes")
	}
	for _, db := range engines {
		t.Run(db.name, func(t *testing.T) { expiryRace(t, db.url(t)) })
	}
}

func expiryRace(t *testing.T, dbURL string) {
	const (
		n     = 1000
		waves = 4 // the grabs come in waves a second apart: the deadlines span seconds
		// The window counts from each order's confirmation: the grabs,
		// the last confirmation and reading 1,000 deadlines must fit in
		// it with a second to spare, which 10 s, and once 20 s, did not on
		// SQLite with two test suites loading the machine (23.4 s).
		payWithin = 35 * time.Second
		lease     = 2 * time.Second
	)
	ctx := context.Background()
	redisAddr := testenv.RedisAddr(t)
	prefix := testenv.Prefix(t)
	common := []string{"--redis", "redis://" + redisAddr, "--db", dbURL, "--redis-prefix", prefix}

	apiAddr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	api := startProc(t, append([]string{"serve", "--no-worker", "--expiry=false", "--listen", apiAddr, "--admin-token", testAdminToken}, common...)...)
	waitHTTP(t, "http://"+apiAddr+"/healthz")
	var workers []*proc
	var metrics []string
	for i := range 2 {
		addr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
		workers = append(workers, startProc(t, append([]string{"worker", "--consumer", fmt.Sprintf("w%d", i),
			"--expiry-lease", lease.String(), "--expiry-batch", "20", "--metrics-listen", addr}, common...)...))
		metrics = append(metrics, "http://"+addr+"/metrics")
		waitHTTP(t, metrics[i])
	}
	gauge := func(i int, name string) float64 { return scrape(t, metrics[i], name) }
	leader := -1
	// A worker serves /metrics before it has connected and started its
	// expiry job, whose gauges appear then.
	testenv.WaitFor(t, "a worker leads the expiry job", func() bool {
		for i := range workers {
			if v, ok := scraped(t, metrics[i], "seckill_expiry_leader"); ok && v == 1 {
				leader = i
				return true
			}
		}
		return false
	})
	other := 1 - leader

	in := &instance{t: t, url: "http://" + apiAddr, token: testAdminToken, client: &http.Client{Timeout: 30 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: 256}}}
	now := time.Now()
	r := in.do("POST", "/api/v1/activities", in.admin(), fmt.Sprintf(
		`{"name":"expiry race","stock":%d,"starts_at":%q,"ends_at":%q,"pay_within_seconds":%d}`,
		n, now.Format(time.RFC3339Nano), now.Add(time.Hour).Format(time.RFC3339Nano), int(payWithin/time.Second)))
	if r.status != http.StatusCreated {
		t.Fatalf("create activity: %d %v", r.status, r.body)
	}
	id := int64(r.body["id"].(float64))

	// The grabs.
	owners := map[int64]int64{} // order id -> buyer
	for w := range waves {
		start := time.Now()
		var users []int64
		for uid := int64(w*n/waves + 1); uid <= int64((w+1)*n/waves); uid++ {
			users = append(users, uid)
		}
		answered, _ := in.crowd(id, users)
		for uid, set := range answered {
			for oid := range set {
				v, _ := strconv.ParseInt(oid, 10, 64)
				owners[v] = uid
			}
		}
		time.Sleep(time.Until(start.Add(time.Second)))
	}
	if len(owners) != n {
		t.Fatalf("%d orders accepted, want %d", len(owners), n)
	}
	st, err := store.Open(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	testenv.WaitFor(t, "every order confirmed", func() bool {
		c, err := st.StateCounts(ctx, id)
		return err == nil && c[seckill.OrderConfirmed] == n
	})
	// read 8 at a time: one at a time, 1,000 reads took seconds of the window
	deadlines := map[int64]time.Time{}
	var dmu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for oid := range owners {
		g.Go(func() error {
			o, err := st.Order(gctx, oid)
			if err != nil {
				return err
			}
			dmu.Lock()
			deadlines[oid] = o.PayBy
			dmu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	var first, last time.Time
	for _, d := range deadlines {
		if first.IsZero() || d.Before(first) {
			first = d
		}
		if d.After(last) {
			last = d
		}
	}
	t.Logf("%d orders confirmed; deadlines from %s to %s (in %v)", n, first.Format(time.StampMilli),
		last.Format(time.StampMilli), time.Until(first).Round(time.Millisecond))
	if time.Until(first) < time.Second {
		t.Fatalf("the first deadline is %v away: too close to stage the pause", time.Until(first))
	}

	// The buyers: each pays within 20 ms of the deadline, before or after,
	// and, told 503 or cut off (an unknown outcome), asks again as a
	// client would: the order id is the idempotency key, so a payment that
	// was made is answered again.
	type answer struct {
		status int
		code   string
	}
	var mu sync.Mutex
	answers := map[int64]answer{}
	retries := 0
	var buyers sync.WaitGroup
	for oid, uid := range owners {
		buyers.Add(1)
		go func() {
			defer buyers.Done()
			time.Sleep(time.Until(deadlines[oid].Add(time.Duration(rand.IntN(41)-20) * time.Millisecond)))
			var a answer
			for try := 0; try < 20; try++ {
				r, err := pay(in.client, in.url, oid, uid)
				a = answer{r.status, r.code()}
				if err == nil && r.status != http.StatusServiceUnavailable {
					break
				}
				mu.Lock()
				retries++
				mu.Unlock()
				time.Sleep(50 * time.Millisecond)
			}
			mu.Lock()
			answers[oid] = a
			mu.Unlock()
		}()
	}

	// The pause: the leader is stopped as it goes to sleep after a round
	// (the moment its gauge of the last run moves), shortly before the
	// first deadline, so that the deadlines begin while it is stopped;
	// it is resumed past its lease, in the middle of them.
	db, err := sqlDB(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	time.Sleep(time.Until(first.Add(-1500 * time.Millisecond)))
	// The lead may have changed hands since the start (renewals late on a
	// loaded machine): the one to stop is the one leading now.
	testenv.WaitFor(t, "one worker leads the expiry job", func() bool {
		l0, l1 := gauge(0, "seckill_expiry_leader"), gauge(1, "seckill_expiry_leader")
		if l0+l1 == 1 {
			leader = int(l1)
		}
		return l0+l1 == 1
	})
	other = 1 - leader
	var stale int64 // the stopped leader's token
	if err := db.QueryRow(`SELECT token FROM fences WHERE name = '` + prefix + `:expiry'`).Scan(&stale); err != nil {
		t.Fatal(err)
	}
	run := gauge(leader, "seckill_expiry_last_run_timestamp_seconds")
	for time.Until(first) > 150*time.Millisecond && gauge(leader, "seckill_expiry_last_run_timestamp_seconds") == run {
		time.Sleep(5 * time.Millisecond)
	}
	workers[leader].signal(syscall.SIGSTOP)
	stoppedAt := time.Now()
	t.Logf("w%d (token %d) stopped %v before the first deadline", leader, stale, time.Until(first).Round(time.Millisecond))
	took := testenv.WaitFor(t, "the other worker takes over", func() bool { return gauge(other, "seckill_expiry_leader") == 1 })
	t.Logf("w%d leads %v after the stop (lease %v)", other, took.Round(time.Millisecond), lease)
	// A leader renews at a third of its lease: stopped, it holds the lead
	// for two thirds of a lease at least. A takeover sooner means the lead
	// had passed before the stop (its lease ran out unrenewed on a loaded
	// machine, and the other worker's claim came between the reads above
	// and the stop): the token read is then perhaps the other's, whose
	// writes after the stop are no fault.
	staged := took >= lease/3
	time.Sleep(time.Until(stoppedAt.Add(lease + time.Second)))
	workers[leader].signal(syscall.SIGCONT)
	t.Logf("w%d resumed %v after the first deadline; the last one is %v later", leader,
		time.Since(first).Round(time.Millisecond), time.Until(last).Round(time.Millisecond))
	// Resumed, it steps down: refused by the fence if its next write came
	// first (the usual case), or without writing if it saw first that
	// its lease had run out (TestFence in package expiry forces the
	// former).
	testenv.WaitFor(t, "the resumed leader steps down", func() bool { return gauge(leader, "seckill_expiry_leader") == 0 })

	buyers.Wait()
	testenv.WaitFor(t, "no order left confirmed, no return pending", func() bool {
		c, err := st.StateCounts(ctx, id)
		if err != nil || c[seckill.OrderConfirmed] != 0 {
			return false
		}
		p, err := st.PendingReturns(ctx, 1)
		return err == nil && len(p) == 0
	})
	fenced := []float64{gauge(0, "seckill_expiry_fenced_total"), gauge(1, "seckill_expiry_fenced_total")}
	expired := []float64{gauge(0, "seckill_expiry_expired_total"), gauge(1, "seckill_expiry_expired_total")}
	for _, p := range append(workers, api) {
		p.signal(syscall.SIGTERM)
		<-p.done
		if p.err != nil {
			t.Errorf("%s after SIGTERM: %v, want exit 0", p.cmd.Args[1], p.err)
		}
	}

	// What each buyer was told is what the database holds.
	var paid, late int
	for oid := range owners {
		o, err := st.Order(ctx, oid)
		if err != nil {
			t.Fatal(err)
		}
		a := answers[oid]
		switch {
		case a.status == http.StatusOK && o.Status == seckill.OrderPaid:
			paid++
		case a.status == http.StatusConflict && a.code == seckill.EORDEREXPIRED && o.Status == seckill.OrderExpired:
			late++
		default:
			t.Errorf("order %d: the buyer was told %d %q; the order is %s", oid, a.status, a.code, o.Status)
		}
		if o.Status == seckill.OrderPaid && !o.PaidAt.Before(o.PayBy) {
			t.Errorf("order %d paid at %v, its deadline %v", oid, o.PaidAt, o.PayBy)
		}
		if o.Status == seckill.OrderExpired && o.ClosedAt.Before(o.PayBy) {
			t.Errorf("order %d expired at %v, before its deadline %v", oid, o.ClosedAt, o.PayBy)
		}
	}
	t.Logf("%d paid in time, %d too late and expired (%d calls answered 503 or cut off, and repeated); expired by w0 %v, w1 %v; fenced writes w0 %v, w1 %v",
		paid, late, retries, expired[0], expired[1], fenced[0], fenced[1])
	if paid == 0 || late == 0 {
		t.Errorf("%d paid, %d late: the buyers did not race the deadline", paid, late)
	}
	// The leader that took over led. A write of its may have been refused:
	// on a loaded machine its own renewals can be late too, and then it
	// loses the lead and wins it again (or the resumed one does) with a
	// newer token, under which a write is made while one of the old token
	// is on its way. That refusal is the fence at work; what it protects is
	// checked below (no unit returned twice or for a paid order, nothing
	// written by the stopped leader after its stop) and above (no order
	// expired before its deadline).
	if expired[other] == 0 {
		t.Errorf("the leader that took over expired %v orders (had %v writes refused; the resumed one expired %v): want some",
			expired[other], fenced[other], expired[leader])
	}

	// No paid order has a returned unit; each expired one has exactly one
	// (order_id is the key of order_returns); none was written by the
	// stopped leader after it stopped.
	var paidReturned, returned int64
	q := fmt.Sprintf(`SELECT count(*) FROM orders o JOIN order_returns r ON r.order_id = o.id WHERE o.activity_id = %d AND o.status = 'paid'`, id)
	if err := db.QueryRow(q).Scan(&paidReturned); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(fmt.Sprintf(`SELECT count(*) FROM order_returns WHERE activity_id = %d`, id)).Scan(&returned); err != nil {
		t.Fatal(err)
	}
	if paidReturned != 0 || returned != int64(late) {
		t.Errorf("%d paid orders with a returned unit, %d returns for %d expired orders", paidReturned, returned, late)
	}
	if staged {
		checkStaleWrites(t, ctx, db, st, stale, stoppedAt)
	} else {
		t.Logf("the lead passed before the stop (taken over %v after it): the writes of token %d are not checked", took, stale)
	}

	// Every unit accounted for, in the database and in Redis.
	a, err := st.Activity(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	e := stock.New(rdb, stock.Config{Prefix: prefix})
	defer e.Close()
	inRedis, err := e.Remaining(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if a.Remaining != n-int64(paid) || inRedis != a.Remaining {
		t.Errorf("stock %d, %d paid: remaining %d in the database, %d in redis", n, paid, a.Remaining, inRedis)
	}
}

// pay has buyer uid pay order oid; an error is a transport error.
func pay(c *http.Client, base string, oid, uid int64) (reply, error) {
	req, err := http.NewRequest("POST", fmt.Sprintf("%s/api/v1/orders/%d/pay", base, oid),
		strings.NewReader(fmt.Sprintf(`{"payment_ref":"ref-%d"}`, oid)))
	if err != nil {
		return reply{}, err
	}
	req.Header.Set("X-User-ID", strconv.FormatInt(uid, 10))
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	r := reply{status: resp.StatusCode, body: map[string]any{}}
	return r, json.NewDecoder(resp.Body).Decode(&r.body)
}

// scrape reads one unlabelled metric from a /metrics page.
func scrape(t *testing.T, url, name string) float64 {
	t.Helper()
	v, ok := scraped(t, url, name)
	if !ok {
		t.Fatalf("%s has no %s", url, name)
	}
	return v
}

// scraped is scrape that reports a metric not (yet) exposed.
func scraped(t *testing.T, url, name string) (float64, bool) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %q: %v", url, sc.Text(), err)
			}
			return f, true
		}
	}
	return 0, false
}

// TestExpiryFlags: bad values of the expiry and worker flags are refused,
// naming the flag, by serve and worker, from the command line and the
// environment.
func TestExpiryFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  [2]string
		want string
	}{
		{[]string{"--expiry-lease", "10ms"}, [2]string{}, "-expiry-lease: 10ms is not between 100ms and 1h"},
		{[]string{"--expiry-lease", "soon"}, [2]string{}, "-expiry-lease"},
		{[]string{"--expiry-batch", "0"}, [2]string{}, "-expiry-batch: 0 is not between 1 and 500"},
		{[]string{"--expiry-batch", "501"}, [2]string{}, "-expiry-batch: 501 is not between 1 and 500"},
		{[]string{"--expiry=maybe"}, [2]string{}, "-expiry"},
		{nil, [2]string{"SECKILL_EXPIRY_BATCH", "x"}, "SECKILL_EXPIRY_BATCH"},
		{[]string{"--linger", "2s"}, [2]string{}, "-linger: 2s is not between 0 and 1s"},
		{[]string{"--linger", "-1ms"}, [2]string{}, "-linger: -1ms is not between 0 and 1s"},
		{nil, [2]string{"SECKILL_LINGER", "soon"}, "SECKILL_LINGER"},
		{[]string{"--redis-prefix", strings.Repeat("p", 60)}, [2]string{}, "--redis-prefix: \"" + strings.Repeat("p", 60) + "\" is too long"},
	} {
		for _, cmd := range []string{"serve", "worker"} {
			t.Run(cmd, func(t *testing.T) {
				if tc.env[0] != "" {
					t.Setenv(tc.env[0], tc.env[1])
				}
				// Were the value let through, the command would stop at once.
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				var stderr strings.Builder
				code := run(ctx, append([]string{cmd, "--redis", "redis://127.0.0.1:1", "--db", "sqlite://:memory:"}, tc.args...), io.Discard, &stderr)
				if code != 2 || !strings.Contains(stderr.String(), tc.want) {
					t.Errorf("%s %v (env %v): exit %d, %q; want 2 and %q", cmd, tc.args, tc.env, code, stderr.String(), tc.want)
				}
			})
		}
	}
}

// checkStaleWrites checks that no order expired under token stale, the
// stopped leader's, closed at or after its stop.
func checkStaleWrites(t *testing.T, ctx context.Context, db *sql.DB, st seckill.Store, stale int64, stoppedAt time.Time) {
	t.Helper()
	rows, err := db.Query(fmt.Sprintf(`SELECT order_id FROM order_returns WHERE fence = %d`, stale))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var oid int64
		if err := rows.Scan(&oid); err != nil {
			t.Fatal(err)
		}
		if o, err := st.Order(ctx, oid); err != nil || !o.ClosedAt.Before(stoppedAt) {
			t.Errorf("order %d expired by the stopped leader at %v, after it was stopped at %v (%v)", oid, o.ClosedAt, stoppedAt, err)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}
