package postgres_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/store/internal/sqlstore"
	"github.com/seckilldev/seckill/store/postgres"
	"github.com/seckilldev/seckill/store/storetest"
)

func open(t testing.TB) seckill.Store {
	return openStore(t, testenv.PostgresURL(t))
}

func openStore(t testing.TB, url string) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), url)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestStore(t *testing.T) { storetest.Run(t, open) }

func TestActivityIDLimit(t *testing.T) {
	s := openStore(t, testenv.PostgresURL(t))
	storetest.RunActivityIDLimit(t, s, func(next int64) {
		q := fmt.Sprintf(`ALTER TABLE activities ALTER COLUMN id RESTART WITH %d`, next)
		if _, err := s.Pool().Exec(context.Background(), q); err != nil {
			t.Fatal(err)
		}
	})
}

func TestOpen(t *testing.T) {
	url := testenv.PostgresURL(t)
	storetest.RunOpen(t, func(ctx context.Context) (seckill.Store, error) { return postgres.Open(ctx, url) })

	files, _ := filepath.Glob("migrations/*.sql")
	const q = `SELECT count(*) FROM schema_migrations`
	var n int
	if err := openStore(t, url).Pool().QueryRow(context.Background(), q).Scan(&n); err != nil || n != len(files) || n < 2 {
		t.Errorf("schema_migrations holds %d rows (%v), want one per migration, %d", n, err, len(files))
	}
}

// TestLargeBatch crosses the engine's statement chunks, which the suite's
// batches are too small to.
func TestLargeBatch(t *testing.T) {
	storetest.RunLargeBatch(t, open(t), postgres.Chunk+300, postgres.Chunk+100)
}

func BenchmarkApplyOrders(b *testing.B) { storetest.Benchmark(b, open) }

// TestSchema reads the tables as outside checks and operators do.
func TestSchema(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, testenv.PostgresURL(t))
	starts := time.Date(2030, 1, 2, 3, 4, 5, 678_000_000, time.FixedZone("UTC+8", 8*3600))
	a := seckill.Activity{Name: "schema", Stock: 2, StartsAt: starts, EndsAt: starts.Add(time.Hour)}
	if err := s.CreateActivity(ctx, &a); err != nil {
		t.Fatal(err)
	}
	reqs := []seckill.OrderRequest{
		{OrderID: 11, ActivityID: a.ID, UserID: 1, CreatedAt: starts},
		{OrderID: 12, ActivityID: a.ID, UserID: 1, CreatedAt: starts},
	}
	if _, err := s.ApplyOrders(ctx, reqs); err != nil {
		t.Fatal(err)
	}

	const qActivity = `
SELECT name, stock, remaining, to_char(starts_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS'), created_at <= now()
FROM activities WHERE id = $1`
	var name, startsAt string
	var stock, remaining int64
	var createdOK bool
	if err := s.Pool().QueryRow(ctx, qActivity, a.ID).Scan(&name, &stock, &remaining, &startsAt, &createdOK); err != nil {
		t.Fatal(err)
	}
	if name != "schema" || stock != 2 || remaining != 1 || startsAt != "2030-01-01 19:04:05.678" || !createdOK {
		t.Errorf("activities row = %q %d %d %q %v", name, stock, remaining, startsAt, createdOK)
	}

	const qOrder = `SELECT activity_id, user_id, status, created_at FROM orders WHERE id = 11`
	var act, user int64
	var status string
	var created time.Time
	if err := s.Pool().QueryRow(ctx, qOrder).Scan(&act, &user, &status, &created); err != nil {
		t.Fatal(err)
	}
	if act != a.ID || user != 1 || status != "confirmed" || !created.Equal(starts) {
		t.Errorf("orders row = %d %d %q %v", act, user, status, created)
	}

	const qFailure = `SELECT activity_id, user_id, reason, existing_order_id, created_at FROM order_failures WHERE order_id = 12`
	var reason string
	var existing *int64
	if err := s.Pool().QueryRow(ctx, qFailure).Scan(&act, &user, &reason, &existing, &created); err != nil {
		t.Fatal(err)
	}
	if act != a.ID || user != 1 || reason != seckill.ReasonDuplicate || existing == nil || *existing != 11 {
		t.Errorf("order_failures row = %d %d %q %v", act, user, reason, existing)
	}

	const qNegative = `UPDATE activities SET remaining = -1 WHERE id = $1`
	if _, err := s.Pool().Exec(ctx, qNegative, a.ID); err == nil {
		t.Error("remaining = -1 was accepted, want a CHECK violation")
	}
	const qDuplicate = `INSERT INTO orders (id, activity_id, user_id, holder_user_id, status, created_at) VALUES (13, $1, 1, 1, 'paid', now())`
	if _, err := s.Pool().Exec(ctx, qDuplicate, a.ID); err == nil || !strings.Contains(err.Error(), "orders_activity_holder_key") {
		t.Errorf("a second live order of (activity, user) = %v, want a UNIQUE violation", err)
	}
	const qReturned = `INSERT INTO orders (id, activity_id, user_id, status, created_at) VALUES (13, $1, 1, 'cancelled', now())`
	if _, err := s.Pool().Exec(ctx, qReturned, a.ID); err != nil {
		t.Errorf("a returned order of a user holding another: %v, want it accepted", err)
	}
	for _, q := range []string{
		`INSERT INTO orders (id, activity_id, user_id, status, created_at) VALUES (15, $1, 2, 'confirmed', now())`,
		`INSERT INTO orders (id, activity_id, user_id, holder_user_id, status, created_at) VALUES (15, $1, 2, 3, 'confirmed', now())`,
		`INSERT INTO orders (id, activity_id, user_id, holder_user_id, status, created_at) VALUES (15, $1, 2, 2, 'pending', now())`,
	} {
		if _, err := s.Pool().Exec(ctx, q, a.ID); err == nil || !strings.Contains(err.Error(), "check") {
			t.Errorf("%s: %v, want a CHECK violation", q, err)
		}
	}

	// Every order names an activity that exists (checked once per
	// statement: see migration 0004).
	for _, q := range []string{
		`INSERT INTO orders (id, activity_id, user_id, holder_user_id, status, created_at) VALUES (14, 999999, 1, 1, 'confirmed', now())`,
		`INSERT INTO orders (id, activity_id, user_id, holder_user_id, status, created_at) VALUES
		 (14, $1, 7, 7, 'confirmed', now()), (15, 999999, 8, 8, 'confirmed', now())`,
		`UPDATE orders SET activity_id = 999999 WHERE id = 11`,
		`DELETE FROM activities WHERE id = $1`,
	} {
		if _, err := s.Pool().Exec(ctx, q, pgxArgs(q, a.ID)...); err == nil || !strings.Contains(err.Error(), "orders_activity_id_fkey") {
			t.Errorf("%s: %v, want a foreign key violation", q, err)
		}
	}
	const qMove = `UPDATE orders SET activity_id = $1 WHERE id = 11`
	if _, err := s.Pool().Exec(ctx, qMove, a.ID); err != nil {
		t.Errorf("an update of activity_id to an activity that exists: %v", err)
	}
	unsold := seckill.Activity{Name: "unsold", Stock: 1, StartsAt: starts, EndsAt: starts.Add(time.Hour)}
	if err := s.CreateActivity(ctx, &unsold); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool().Exec(ctx, `DELETE FROM activities WHERE id = $1`, unsold.ID); err != nil {
		t.Errorf("deleting an activity without orders: %v", err)
	}
}

func TestUpgrade(t *testing.T) {
	ctx, url := context.Background(), testenv.PostgresURL(t)
	storetest.RunUpgrade(t, storetest.Upgrade{
		OpenAt: func(version string) (seckill.Store, error) { return postgres.OpenAt(ctx, url, version) },
		Exec: func(old seckill.Store, q string, args ...any) error {
			_, err := old.(*postgres.Store).Pool().Exec(ctx, sqlstore.Dollar(q), args...)
			return err
		},
		Open: func() seckill.Store { return openStore(t, url) },
	})
}

// TestPlans: with 100,000 orders, of which 1% await payment, expiry and the
// outbox read one index range; no sequential scan, no sort.
func TestPlans(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, testenv.PostgresURL(t))
	a := seckill.Activity{Name: "plans", Stock: seckill.MaxStock, StartsAt: time.Now(), EndsAt: time.Now().Add(time.Hour), PayWithin: time.Hour}
	if err := s.CreateActivity(ctx, &a); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO orders (id, activity_id, user_id, holder_user_id, status, created_at, pay_by, paid_at)
		 SELECT i, $1, i, i, CASE WHEN i % 100 = 0 THEN 'confirmed' ELSE 'paid' END, now(), now() + i * interval '1 ms',
		        CASE WHEN i % 100 = 0 THEN NULL ELSE now() END
		 FROM generate_series(1, 100000) AS i`,
		`INSERT INTO order_returns (order_id, activity_id, user_id, status, returned_at, restocked_at)
		 SELECT id, activity_id, user_id, 'cancelled', now(), CASE WHEN id % 1000 = 0 THEN NULL ELSE now() END
		 FROM orders WHERE id % 100 = 1`,
		`ANALYZE orders`,
		`ANALYZE order_returns`,
	} {
		if _, err := s.Pool().Exec(ctx, q, pgxArgs(q, a.ID)...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	for _, tt := range storetest.IndexedQueries(time.Now().Add(time.Minute)) {
		rows, err := s.Pool().Query(ctx, "EXPLAIN "+sqlstore.Dollar(tt.Query), tt.Args...)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, line)
		}
		rows.Close()
		got := strings.Join(plan, "\n")
		t.Logf("EXPLAIN %s\n%s", strings.TrimSpace(tt.Query), got)
		if !strings.Contains(got, "Index") || !strings.Contains(got, tt.Index) || strings.Contains(got, "Seq Scan on orders") ||
			strings.Contains(got, "Seq Scan on order_returns") || strings.Contains(got, "Sort") {
			t.Errorf("plan of %s does not read %s alone", tt.Query, tt.Index)
		}
	}
}

// pgxArgs returns the arguments of q: the activity id if it takes one.
func pgxArgs(q string, activityID int64) []any {
	if strings.Contains(q, "$1") {
		return []any{activityID}
	}
	return nil
}

func TestStalledTransaction(t *testing.T) {
	s := openStore(t, testenv.WithParam(t, testenv.PostgresURL(t), "idle_in_transaction_session_timeout", "1s"))
	storetest.RunStalledTransaction(t, s, func(ctx context.Context, id int64) (func() error, error) {
		tx, err := s.Pool().Begin(ctx)
		if err != nil {
			return nil, err
		}
		if _, err := tx.Exec(ctx, `SELECT id FROM activities WHERE id = $1 FOR UPDATE`, id); err != nil {
			tx.Rollback(ctx)
			return nil, err
		}
		return func() error { return tx.Commit(ctx) }, nil
	})
}

// TestIdleTxTimeout: the store's sessions end when idle in a transaction
// for sqlstore.IdleTxTimeout, unless the URL says otherwise.
func TestIdleTxTimeout(t *testing.T) {
	for _, c := range []struct{ param, want string }{
		{"", fmt.Sprintf("%.0fs", sqlstore.IdleTxTimeout.Seconds())},
		{"0", "0"},
		{"1min", "1min"},
	} {
		url := testenv.PostgresURL(t)
		if c.param != "" {
			url = testenv.WithParam(t, url, "idle_in_transaction_session_timeout", c.param)
		}
		s := openStore(t, url)
		var got string
		if err := s.Pool().QueryRow(context.Background(), `SHOW idle_in_transaction_session_timeout`).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("URL parameter %q: idle_in_transaction_session_timeout = %q, want %q", c.param, got, c.want)
		}
	}
}
