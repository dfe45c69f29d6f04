package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/check"
	"github.com/seckilldev/seckill/dashboard"
	"github.com/seckilldev/seckill/loadgen"
	"github.com/seckilldev/seckill/stock"
)

type demoConfig struct {
	stock       int64
	users       int
	repeat      float64
	concurrency int
	countdown   time.Duration
	redisURL    string
	dbURL       string
	jsonOut     bool
	// The order's life after the grab (0 payWithin: no payment step).
	payWithin             time.Duration
	payShare, cancelShare float64
	// keep leaves the service and its dashboard up after the report, until
	// Enter or Ctrl-C (keepFlags).
	keep bool
	// identity is how buyers are named: header (X-User-ID) or jwt (bearer
	// tokens the demo mints; token is set by runDemo).
	identity string
	token    func(uid int64) (string, error)
	// queueRate, if not 0, puts the sale behind a waiting room that
	// admits this many buyers a second (hold demoQueueHold), and sends
	// the crowd through it.
	queueRate int
}

// demoQueueHold is the hold of the demo's waiting room: no more than two
// buyers admitted and not yet bought for each unit left.
const demoQueueHold = 2

func demoCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c demoConfig
	fs := newFlagSet("demo", stderr)
	fs.Int64Var(&c.stock, "stock", 100, "units on sale")
	fs.IntVar(&c.users, "users", 10000, "distinct users in the crowd")
	fs.Float64Var(&c.repeat, "repeat", 0.2, "share of requests that are a user clicking again, in [0, 0.95]")
	fs.IntVar(&c.concurrency, "concurrency", 64, "connections the crowd uses")
	fs.DurationVar(&c.countdown, "countdown", 3*time.Second, "time from creating the sale to its start")
	fs.StringVar(&c.redisURL, "redis", "", "Redis URL, see Redis URLs below (default: an embedded Redis in this process)")
	fs.StringVar(&c.dbURL, "db", "", "database URL, see Database URLs below (default: a SQLite file in a temporary directory)")
	fs.BoolVar(&c.jsonOut, "json", false, "print the report as JSON")
	fs.StringVar(&c.identity, "identity", "header", "how the crowd names its buyers: header (X-User-ID) or jwt (the service verifies bearer JWTs, which the demo mints with a secret of its own)")
	fs.DurationVar(&c.payWithin, "pay-within", 10*time.Second, "payment window of each order (0: no payment step: orders end confirmed)")
	fs.Float64Var(&c.payShare, "pay", 0.5, "share of the winners who pay")
	fs.Float64Var(&c.cancelShare, "cancel", 0.3, "share of the winners who cancel (the others never pay)")
	fs.IntVar(&c.queueRate, "queue-rate", 0, "put the sale behind a waiting room admitting this many buyers a second (and at most 2 not yet bought for each unit left); the crowd joins it, half before the start, and polls until admitted; its buyer's page is at /queue/ (0: no room)")
	var keep keepFlags
	keep.register(fs)
	if err := fs.parse(args); err != nil {
		return err
	}
	var err error
	if c.keep, err = keep.resolve(fs, &c.countdown); err != nil {
		return err
	}
	switch {
	case c.stock < 1 || c.stock > 10_000_000:
		return usagef("--stock: %d is not between 1 and 10000000", c.stock)
	case c.users < 1 || c.users > 10_000_000:
		return usagef("--users: %d is not between 1 and 10000000", c.users)
	case c.repeat < 0 || c.repeat > 0.95:
		return usagef("--repeat: %v is not between 0 and 0.95", c.repeat)
	case c.concurrency < 1 || c.concurrency > 10000:
		return usagef("--concurrency: %d is not between 1 and 10000", c.concurrency)
	case c.countdown < 0 || c.countdown > time.Hour:
		return usagef("--countdown: %v is not between 0 and 1h", c.countdown)
	case c.identity != "header" && c.identity != "jwt":
		return usagef("--identity: %q is not one of header, jwt", c.identity)
	case c.payWithin < 0 || c.payWithin > 10*time.Minute || c.payWithin%time.Second != 0:
		return usagef("--pay-within: %v is not whole seconds between 0 and 10m", c.payWithin)
	case c.payShare < 0 || c.payShare > 1:
		return usagef("--pay: %v is not between 0 and 1", c.payShare)
	case c.cancelShare < 0 || c.payShare+c.cancelShare > 1:
		return usagef("--cancel: %v is not between 0 and 1 - --pay", c.cancelShare)
	case c.queueRate < 0 || c.queueRate > seckill.MaxQueueRate:
		return usagef("--queue-rate: %d is not between 0 and %d", c.queueRate, seckill.MaxQueueRate)
	}
	if c.queueRate > 0 {
		// The order's life after the sale (payments, cancels, expiries
		// and a late crowd grabbing what comes back) is played without a
		// waiting room: the demo through one ends at the sell-out.
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if set["pay-within"] || set["pay"] || set["cancel"] || set["repeat"] {
			return usagef("--pay-within, --pay, --cancel and --repeat shape the demo without a waiting room; with --queue-rate each user joins, and grabs once admitted")
		}
		c.payWithin, c.repeat = 0, 0
	}
	// Before the embedded Redis or the SQLite directory of the defaults.
	if err := checkURLs(c.redisURL, c.dbURL); err != nil {
		return err
	}
	return runDemo(ctx, c, stdout, stderr)
}

// demoReport is what `seckill demo --json` prints.
type demoReport struct {
	Load   *loadgen.Report `json:"load"`
	After  *afterReport    `json:"after,omitempty"`
	Checks *check.Report   `json:"checks"`
	OK     bool            `json:"ok"`
}

// runDemo runs the demo; its errors until the service serves are
// startErrors.
func runDemo(ctx context.Context, c demoConfig, stdout, stderr io.Writer) (err error) {
	started := false
	defer func() {
		if !started {
			err = notStarted(err)
		}
	}()
	// The countdown, the crowd's progress, the service's log and the demo
	// itself all write to stderr, from their own goroutines.
	stderr = &lockedWriter{w: stderr}
	say := func(format string, args ...any) { fmt.Fprintf(stderr, format+"\n", args...) }
	if c.redisURL == "" {
		url, stop, err := startEmbeddedRedis()
		if err != nil {
			return err
		}
		defer stop()
		c.redisURL = url
		say("redis:    embedded (%s), running the same Lua scripts as a real Redis", url)
	} else {
		say("redis:    %s", redactURL(c.redisURL))
	}
	if c.dbURL == "" {
		dir, err := os.MkdirTemp("", "seckill-demo")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		c.dbURL = "sqlite://" + filepath.Join(dir, "demo.db")
		say("database: embedded SQLite (%s)", strings.TrimPrefix(c.dbURL, "sqlite://"))
	} else {
		say("database: %s", redactURL(c.dbURL))
	}

	var guard guardFlags
	var crowd buyers
	if c.identity == "jwt" {
		secret := randomHex(32)
		guard = guardFlags{identity: "jwt", jwtSecret: secret}
		crowd = jwtBuyers(secret, "", "", "")
		say("identity: bearer JWTs (HS256) that the service verifies, minted by the crowd")
	}
	c.token = crowd.token()

	// The service, in this process, on a loopback port.
	token := "demo-" + randomHex(16)
	prefix := "demo" + randomHex(4)
	ready := make(chan string, 1)
	srvCtx, stopSrv := context.WithCancel(ctx)
	defer stopSrv()
	srvDone := make(chan error, 1)
	go func() {
		srvDone <- runServe(srvCtx, serveConfig{listen: "127.0.0.1:0", adminToken: token,
			backend: backendFlags{redisURL: c.redisURL, dbURL: c.dbURL, prefix: prefix},
			worker:  workerFlags{batch: 200, linger: 50 * time.Millisecond, claimIdle: 15 * time.Second},
			guard:   guard,
			logs:    logFlags{level: "warn", format: "text"},
			ready:   func(addr string) { ready <- addr }}, io.Discard, stderr)
	}()
	var base string
	select {
	case addr := <-ready:
		base = "http://" + addr
	case err := <-srvDone:
		return fmt.Errorf("start the service: %w", err)
	case <-ctx.Done():
		return ctx.Err()
	}
	started = true
	say("service:  %s (HTTP API, order worker)", base)
	say("dashboard: %s%s (admin token %s)", base, dashboard.Prefix, token)

	startsAt := time.Now().Add(c.countdown).Truncate(time.Millisecond)
	room := ""
	if c.queueRate > 0 {
		room = fmt.Sprintf(`{"rate":%d,"hold":%d}`, c.queueRate, demoQueueHold)
	}
	id, err := createSale(ctx, base, token, c.stock, startsAt, c.payWithin, 1, room)
	if err != nil {
		return err
	}
	say("sale:     activity %d, %d units, starts %s", id, c.stock, startsAt.Format("15:04:05.000"))
	crowdCfg := loadgen.Config{URL: base, ActivityID: id, Users: c.users,
		Concurrency: c.concurrency, RepeatShare: c.repeat, StartAt: startsAt,
		WatchRemaining: true, Progress: loadgen.ProgressWriter(stderr), Token: c.token}
	if c.queueRate > 0 {
		// Half the crowd joins in the second half of the countdown (the
		// draw), the other half as long again after the start.
		crowdCfg.Queue = &loadgen.Queue{Early: c.countdown / 2}
		if c.countdown > 0 {
			crowdCfg.Queue.JoinRate = float64(c.users) / c.countdown.Seconds()
		}
		say("waiting room: %d admitted a second, hold %d; a buyer's page: %s/queue/?activity=%d", c.queueRate, demoQueueHold, base, id)
	}
	go countdown(ctx, startsAt, stderr)

	rep, err := loadgen.Run(ctx, crowdCfg)
	if err != nil {
		return fmt.Errorf("crowd: %w", err)
	}

	say("waiting for the order worker to write every order to the database...")
	rdb, err := stock.Dial(ctx, c.redisURL)
	if err != nil {
		return err
	}
	defer rdb.Close()
	drainErr := check.WaitDrained(ctx, rdb, prefix, id, 2*time.Minute)
	if drainErr != nil {
		say("not drained: %v", drainErr)
	}
	answers := &check.Answers{ByUser: rep.OrdersByUser(), Uncertain: rep.UncertainUsers()}
	db, err := check.Open(ctx, c.dbURL)
	if err != nil {
		return err
	}
	defer db.Close()
	checkCfg := check.Config{DB: db, Redis: rdb, Prefix: prefix, ActivityID: id, Answers: answers}
	var after *afterReport
	if c.payWithin > 0 && drainErr == nil {
		if after, err = afterTheGrab(ctx, c, base, id, winnersOf(answers.ByUser), answers, crowd.identify(), say,
			func(ctx context.Context) (*check.Report, error) { return check.Run(ctx, checkCfg) }); err != nil {
			return err
		}
		if drainErr = check.WaitDrained(ctx, rdb, prefix, id, 2*time.Minute); drainErr != nil {
			say("not drained: %v", drainErr)
		}
	}
	res, err := settled(ctx, checkCfg)
	if err != nil {
		return fmt.Errorf("check: %w", err)
	}
	if c.jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(demoReport{Load: rep, After: after, Checks: res, OK: res.OK()}); err != nil {
			return err
		}
	} else {
		fmt.Fprintln(stdout)
		_ = rep.WriteTable(stdout)
		if rep.Queue != nil {
			_ = rep.Queue.WriteTable(stdout)
		}
		fmt.Fprintln(stdout)
		_ = res.WriteTable(stdout)
		fmt.Fprintln(stdout)
	}
	if c.keep {
		keepServing(ctx, os.Stdin, base+dashboard.Prefix, stderr)
	}
	stopSrv()
	if err := <-srvDone; err != nil {
		say("service stopped with: %v", err)
	}
	if !res.OK() {
		return fmt.Errorf("invariants violated: %v", res.Err())
	}
	if c.jsonOut {
		return nil // the report said it: "ok"
	}
	fmt.Fprintf(stdout, "PASS: sold %d of %d, 0 oversold, 0 duplicates, 0 lost orders (checked against the database)\n",
		res.Sold(), res.Stock)
	if after != nil {
		fmt.Fprintf(stdout, "      %d paid, %d awaiting payment; %d cancelled and %d expired units were sold again, each returned once\n",
			res.Paid, res.Confirmed, res.Cancelled, res.Expired)
	}
	return nil
}

// createSale creates the demo's activity through the admin API.
//
// room, if not "", is the sale's waiting room: the JSON of the activity's
// "queue" member.
func createSale(ctx context.Context, base, token string, stockN int64, startsAt time.Time, payWithin time.Duration, buckets int, room string) (int64, error) {
	queue := ""
	if room != "" {
		queue = `,"queue":` + room
	}
	body := fmt.Sprintf(`{"name":"demo flash sale","stock":%d,"starts_at":%q,"ends_at":%q,"pay_within_seconds":%d,"buckets":%d%s}`, stockN,
		startsAt.UTC().Format(time.RFC3339Nano), startsAt.Add(time.Hour).UTC().Format(time.RFC3339Nano), int64(payWithin.Seconds()), max(1, buckets), queue)
	req, err := http.NewRequestWithContext(ctx, "POST", base+"/api/v1/activities", strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("create the sale: %w", err)
	}
	defer resp.Body.Close()
	var a struct {
		ID    int64 `json:"id"`
		Error *struct {
			Code, Message string
		} `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil || resp.StatusCode != http.StatusCreated {
		return 0, fmt.Errorf("create the sale: HTTP %d %+v %v", resp.StatusCode, a.Error, err)
	}
	return a.ID, nil
}

// countdown prints the seconds left until the start.
func countdown(ctx context.Context, startsAt time.Time, w io.Writer) {
	for {
		left := time.Until(startsAt)
		if left <= 0 {
			fmt.Fprintln(w, "GO! the crowd is released")
			return
		}
		fmt.Fprintf(w, "sale starts in %.0fs...\n", left.Seconds())
		step := left - left.Truncate(time.Second)
		if step <= 0 {
			step = time.Second
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(step):
		}
	}
}

// lockedWriter serialises the writes of several goroutines to one writer
// (an *os.File needs none, but runDemo takes any io.Writer).
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
