package compare_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seckilldev/seckill/compare"
	"github.com/seckilldev/seckill/internal/testenv"
)

// smallCrowd is a crowd small enough for the race detector: 10 units, 200
// users with repeated clicks.
func smallCrowd(t *testing.T, dbURL string, strategies ...string) compare.Config {
	t.Helper()
	return compare.Config{
		DB:          dbURL,
		Redis:       "redis://" + testenv.RedisAddr(t),
		Prefix:      testenv.Prefix(t),
		Strategies:  strategies,
		Stock:       10,
		Items:       2,
		Users:       200,
		Concurrency: 32,
		RepeatShare: 0.3,
		Requests:    600,
		Rounds:      1,
		// The requests bound a round; the time caps are backstops: on a
		// loaded machine under -race db-only's buyers, who take turns on a
		// row lock, waited more than the default 5 s each (counted failed).
		Duration: time.Minute,
		Timeout:  30 * time.Second,
		LockWait: time.Second, // the race detector slows the holders down
		Log:      slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
}

func sqliteURL(t *testing.T) string {
	return "sqlite://" + filepath.Join(t.TempDir(), "compare.db")
}

func run(t *testing.T, cfg compare.Config) *compare.Table {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	table, err := compare.Run(ctx, cfg)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return table
}

// assertSafe fails unless every round of row sold its whole stock, no more,
// one order per user, and told the buyers what the database holds.
func assertSafe(t *testing.T, row compare.Row) {
	t.Helper()
	for i, r := range row.Rounds {
		if r.Oversold != 0 || r.Duplicates != 0 || r.Sold != r.Stock {
			t.Errorf("%s round %d: sold %d of %d, oversold %d, duplicate buyers %d; want exactly the stock sold, once per user (notes: %q)",
				row.Strategy, i+1, r.Sold, r.Stock, r.Oversold, r.Duplicates, r.Notes)
		}
		if r.Answers.Accepted != r.Sold || r.UsersToldTwoOrders != 0 {
			t.Errorf("%s round %d: %d users told 202 and %d told two orders, for %d orders; want one 202 per order",
				row.Strategy, i+1, r.Answers.Accepted, r.UsersToldTwoOrders, r.Sold)
		}
		if bad := r.Answers.Errors + r.Answers.Timeouts + r.Answers.Other + r.Failed; bad != 0 {
			t.Errorf("%s round %d: %d requests failed: %+v", row.Strategy, i+1, bad, r.Answers)
		}
	}
}

func TestSafeStrategiesNeverOversell(t *testing.T) {
	for _, name := range compare.All {
		if !compare.Safe(name) {
			continue
		}
		t.Run(name, func(t *testing.T) {
			table := run(t, smallCrowd(t, sqliteURL(t), name))
			if len(table.Rows) != 1 {
				t.Fatalf("got %d rows, want 1", len(table.Rows))
			}
			assertSafe(t, table.Rows[0])
		})
	}
}

// The control: the unsafe strategies must be caught overselling, or the
// table could not catch a violation either.
func TestUnsafeStrategiesOversell(t *testing.T) {
	for _, name := range []string{compare.Naive, compare.UserLock} {
		t.Run(name, func(t *testing.T) {
			const attempts = 5
			for i := range attempts {
				cfg := smallCrowd(t, sqliteURL(t), name)
				cfg.Items = 1 // the whole crowd on one item
				r := run(t, cfg).Rows[0].Rounds[0]
				t.Logf("attempt %d: sold %d of %d, oversold %d, duplicate buyers %d", i+1, r.Sold, r.Stock, r.Oversold, r.Duplicates)
				if r.Oversold != max(0, r.Sold-r.Stock) {
					t.Fatalf("oversold %d does not match sold %d - stock %d", r.Oversold, r.Sold, r.Stock)
				}
				if r.Sold > r.Stock {
					return
				}
			}
			t.Errorf("%s never oversold in %d attempts", name, attempts)
		})
	}
}

func TestRunAllOnSQLite(t *testing.T) {
	testRunAll(t, sqliteURL(t))
}

func TestRunAllOnPostgres(t *testing.T) {
	testRunAll(t, testenv.PostgresURL(t))
}

func testRunAll(t *testing.T, dbURL string) {
	cfg := smallCrowd(t, dbURL)
	cfg.Rounds = 2
	table := run(t, cfg)
	var got []string
	for _, row := range table.Rows {
		got = append(got, row.Strategy)
		if len(row.Rounds) != 2 {
			t.Errorf("%s: %d rounds, want 2", row.Strategy, len(row.Rounds))
		}
		if row.Throughput <= 0 || row.P50 <= 0 || row.P99 < row.P50 {
			t.Errorf("%s: throughput %.0f, p50 %s, p99 %s", row.Strategy, row.Throughput, row.P50, row.P99)
		}
		if row.Safe {
			assertSafe(t, row)
		}
	}
	if strings.Join(got, ",") != strings.Join(compare.All, ",") {
		t.Fatalf("rows %v, want %v", got, compare.All)
	}
	if r := table.Rows[1]; r.Strategy != compare.GlobalLock || r.Ratio != 1 {
		t.Errorf("global-lock ratio %v, want 1", r.Ratio)
	}

	var buf bytes.Buffer
	if err := table.Write(&buf); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", buf.String())
	out := strings.Join(strings.Fields(buf.String()), " ") // the note is wrapped
	for _, want := range append([]string{"req/s", "oversold", "dup users", "4 cores", "ratio to global-lock"}, compare.All...) {
		if !strings.Contains(out, want) {
			t.Errorf("table output lacks %q", want)
		}
	}

	b, err := json.Marshal(table)
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Settings struct{ Database string }
		Rows     []struct {
			Strategy string
			Rounds   []struct {
				Sold     *int64 `json:"sold"`
				Oversold *int64 `json:"oversold"`
			}
		}
	}
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Rows) != len(compare.All) || back.Rows[0].Rounds[0].Sold == nil || back.Rows[0].Rounds[0].Oversold == nil {
		t.Errorf("JSON lacks rows or counts: %s", b)
	}
	if want := strings.SplitN(dbURL, ":", 2)[0]; back.Settings.Database != want {
		t.Errorf("JSON database %q, want %q", back.Settings.Database, want)
	}
}

// The strategies whose SQL differs between engines, on MySQL/MariaDB.
func TestSQLStrategiesOnMySQL(t *testing.T) {
	table := run(t, smallCrowd(t, testenv.MySQLURL(t), compare.DBOnly, compare.ActivityLock))
	for _, row := range table.Rows {
		assertSafe(t, row)
	}
}

func TestConfigErrors(t *testing.T) {
	ctx := context.Background()
	for _, cfg := range []compare.Config{
		{Strategies: []string{"optimistic"}},
		{Prefix: "a{b}"},
		{Stock: 3, Items: 4},
		{RepeatShare: 1},
		{LockWait: time.Second, LockTTL: time.Second},
		{DB: "oracle://x"},
	} {
		if _, err := compare.Run(ctx, cfg); err == nil {
			t.Errorf("Run(%+v) succeeded, want an error", cfg)
		}
	}
}

// tWriter sends log lines to the test log.
type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
