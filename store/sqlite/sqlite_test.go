package sqlite_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/store/internal/sqlstore"
	"github.com/seckilldev/seckill/store/sqlite"
	"github.com/seckilldev/seckill/store/storetest"
)

func open(t testing.TB) seckill.Store {
	return openStore(t, "sqlite://"+filepath.Join(t.TempDir(), "seckill.db"))
}

func openStore(t testing.TB, url string) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), url)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestStore(t *testing.T) { storetest.Run(t, open) }

func TestActivityIDLimit(t *testing.T) {
	s := openStore(t, "sqlite://"+filepath.Join(t.TempDir(), "seckill.db"))
	storetest.RunActivityIDLimit(t, s, func(next int64) {
		const q = `UPDATE sqlite_sequence SET seq = ? WHERE name = 'activities'`
		if _, err := s.DB().ExecContext(context.Background(), q, next-1); err != nil {
			t.Fatal(err)
		}
	})
}

// An in-memory database must hold up under the store's connection pool.
func TestStoreInMemory(t *testing.T) {
	storetest.Run(t, func(t testing.TB) seckill.Store { return openStore(t, "sqlite://:memory:") })
}

func TestOpen(t *testing.T) {
	url := "sqlite://" + filepath.Join(t.TempDir(), "seckill.db")
	storetest.RunOpen(t, func(ctx context.Context) (seckill.Store, error) { return sqlite.Open(ctx, url) })

	files, _ := filepath.Glob("migrations/*.sql")
	const q = `SELECT count(*) FROM schema_migrations`
	var n int
	if err := openStore(t, url).DB().QueryRowContext(context.Background(), q).Scan(&n); err != nil || n != len(files) || n < 2 {
		t.Errorf("schema_migrations holds %d rows (%v), want one per migration, %d", n, err, len(files))
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct{ url, want string }{
		{"sqlite://", "no path"},
		{"sqlite:///nonexistent-dir/x/seckill.db", "cannot open /nonexistent-dir/x/seckill.db"},
		{"sqlite://" + dir + "/x.db?_time_format=bogus", "_time_format"},
		{"sqlite://" + dir + "/%zz.db", "bad url"},
		{"/tmp/x.db", "want sqlite:///abs/path.db"},
	} {
		_, err := sqlite.Open(context.Background(), tt.url)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Open(%q) = %v, want an error about %q", tt.url, err, tt.want)
		}
	}
}

func BenchmarkApplyOrders(b *testing.B) { storetest.Benchmark(b, open) }

// TestSchema reads the tables as outside checks and operators do.
func TestSchema(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, "sqlite://"+filepath.Join(t.TempDir(), "seckill.db"))
	db := s.DB()
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
SELECT name, stock, remaining, starts_at, abs(julianday('now') - julianday(created_at)) * 86400 < 60
FROM activities WHERE id = ?`
	var name, startsAt string
	var stock, remaining int64
	var createdOK bool
	if err := db.QueryRowContext(ctx, qActivity, a.ID).Scan(&name, &stock, &remaining, &startsAt, &createdOK); err != nil {
		t.Fatal(err)
	}
	if name != "schema" || stock != 2 || remaining != 1 || startsAt != "2030-01-01 19:04:05.678" || !createdOK {
		t.Errorf("activities row = %q %d %d %q %v", name, stock, remaining, startsAt, createdOK)
	}

	const qOrder = `SELECT activity_id, user_id, status, created_at FROM orders WHERE id = 11`
	var act, user int64
	var status, created string
	if err := db.QueryRowContext(ctx, qOrder).Scan(&act, &user, &status, &created); err != nil {
		t.Fatal(err)
	}
	if act != a.ID || user != 1 || status != "confirmed" || created != "2030-01-01 19:04:05.678" {
		t.Errorf("orders row = %d %d %q %q", act, user, status, created)
	}

	const qFailure = `SELECT activity_id, user_id, reason, existing_order_id FROM order_failures WHERE order_id = 12`
	var reason string
	var existing *int64
	if err := db.QueryRowContext(ctx, qFailure).Scan(&act, &user, &reason, &existing); err != nil {
		t.Fatal(err)
	}
	if act != a.ID || user != 1 || reason != seckill.ReasonDuplicate || existing == nil || *existing != 11 {
		t.Errorf("order_failures row = %d %d %q %v", act, user, reason, existing)
	}

	const qNegative = `UPDATE activities SET remaining = -1 WHERE id = ?`
	if _, err := db.ExecContext(ctx, qNegative, a.ID); err == nil {
		t.Error("remaining = -1 was accepted, want a CHECK violation")
	}
	const qDuplicate = `INSERT INTO orders (id, activity_id, user_id, holder_user_id, status, created_at) VALUES (13, ?, 1, 1, 'paid', '2030-01-01 00:00:00.000')`
	if _, err := db.ExecContext(ctx, qDuplicate, a.ID); err == nil || !strings.Contains(err.Error(), "UNIQUE") {
		t.Errorf("a second live order of (activity, user) = %v, want a UNIQUE violation", err)
	}
	const qReturned = `INSERT INTO orders (id, activity_id, user_id, status, created_at) VALUES (13, ?, 1, 'cancelled', '2030-01-01 00:00:00.000')`
	if _, err := db.ExecContext(ctx, qReturned, a.ID); err != nil {
		t.Errorf("a returned order of a user holding another: %v, want it accepted", err)
	}
	for _, q := range []string{
		`INSERT INTO orders (id, activity_id, user_id, status, created_at) VALUES (15, ?, 2, 'confirmed', '2030-01-01 00:00:00.000')`,
		`INSERT INTO orders (id, activity_id, user_id, holder_user_id, status, created_at) VALUES (15, ?, 2, 3, 'confirmed', '2030-01-01 00:00:00.000')`,
		`INSERT INTO orders (id, activity_id, user_id, holder_user_id, status, created_at) VALUES (15, ?, 2, 2, 'pending', '2030-01-01 00:00:00.000')`,
	} {
		if _, err := db.ExecContext(ctx, q, a.ID); err == nil || !strings.Contains(err.Error(), "CHECK") {
			t.Errorf("%s: %v, want a CHECK violation", q, err)
		}
	}
	const qOrphan = `INSERT INTO orders (id, activity_id, user_id, status, created_at) VALUES (14, 999, 1, 'confirmed', '2030-01-01 00:00:00.000')`
	if _, err := db.ExecContext(ctx, qOrphan); err == nil {
		t.Error("an order of an activity that does not exist was accepted, want a FOREIGN KEY violation")
	}
}

func TestUpgrade(t *testing.T) {
	ctx, url := context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "seckill.db")
	storetest.RunUpgrade(t, storetest.Upgrade{
		OpenAt: func(version string) (seckill.Store, error) { return sqlite.OpenAt(ctx, url, version) },
		Exec: func(old seckill.Store, q string, args ...any) error {
			for i, a := range args {
				if tm, ok := a.(time.Time); ok {
					args[i] = sqlstore.TimeText(tm)
				}
			}
			_, err := old.(*sqlite.Store).DB().ExecContext(ctx, q, args...)
			return err
		},
		Open: func() seckill.Store { return openStore(t, url) },
	})
}

// TestPlans: expiry and the outbox read their indexes, whatever the number
// of orders (SQLite's planner does not look at the table's size).
func TestPlans(t *testing.T) {
	ctx := context.Background()
	db := openStore(t, "sqlite://"+filepath.Join(t.TempDir(), "seckill.db")).DB()
	for _, tt := range storetest.IndexedQueries(sqlstore.TimeText(time.Now())) {
		var plan []string
		rows, err := db.QueryContext(ctx, "EXPLAIN QUERY PLAN "+tt.Query, tt.Args...)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id, parent, notused int
			var detail string
			if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		got := strings.Join(plan, "; ")
		t.Logf("%s\n\t%s", strings.TrimSpace(tt.Query), got)
		if !strings.Contains(got, "INDEX "+tt.Index) || strings.Contains(got, "SCAN orders") || strings.Contains(got, "TEMP B-TREE") {
			t.Errorf("plan of %s: %s; want %s and no scan or sort", tt.Query, got, tt.Index)
		}
	}
}
