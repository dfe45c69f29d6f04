package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/internal/testenv"
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

	const q = `SELECT count(*) FROM schema_migrations`
	var n int
	if err := openStore(t, url).Pool().QueryRow(context.Background(), q).Scan(&n); err != nil || n != 1 {
		t.Errorf("schema_migrations holds %d rows (%v), want 1", n, err)
	}
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
	const qDuplicate = `INSERT INTO orders (id, activity_id, user_id, status, created_at) VALUES (13, $1, 1, 'confirmed', now())`
	if _, err := s.Pool().Exec(ctx, qDuplicate, a.ID); err == nil {
		t.Error("a second order of (activity, user) was accepted, want a UNIQUE violation")
	}
}
