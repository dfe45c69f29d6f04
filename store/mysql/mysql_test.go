package mysql_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/store/mysql"
	"github.com/seckilldev/seckill/store/storetest"
)

func open(t testing.TB) seckill.Store {
	return openStore(t, testenv.MySQLURL(t))
}

func openStore(t testing.TB, url string) *mysql.Store {
	t.Helper()
	s, err := mysql.Open(context.Background(), url)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestStore(t *testing.T) { storetest.Run(t, open) }

func TestActivityIDLimit(t *testing.T) {
	s := openStore(t, testenv.MySQLURL(t))
	storetest.RunActivityIDLimit(t, s, func(next int64) {
		q := fmt.Sprintf(`ALTER TABLE activities AUTO_INCREMENT = %d`, next)
		if _, err := s.DB().ExecContext(context.Background(), q); err != nil {
			t.Fatal(err)
		}
	})
}

func TestOpen(t *testing.T) {
	url := testenv.MySQLURL(t)
	storetest.RunOpen(t, func(ctx context.Context) (seckill.Store, error) { return mysql.Open(ctx, url) })

	const q = `SELECT count(*) FROM schema_migrations`
	var n int
	if err := openStore(t, url).DB().QueryRowContext(context.Background(), q).Scan(&n); err != nil || n != 1 {
		t.Errorf("schema_migrations holds %d rows (%v), want 1", n, err)
	}
}

func BenchmarkApplyOrders(b *testing.B) { storetest.Benchmark(b, open) }

// TestSchema reads the tables as outside checks and operators do.
func TestSchema(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, testenv.MySQLURL(t))
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
SELECT name, stock, remaining, DATE_FORMAT(starts_at, '%Y-%m-%d %H:%i:%s.%f'),
       TIMESTAMPDIFF(SECOND, created_at, UTC_TIMESTAMP()) BETWEEN 0 AND 60
FROM activities WHERE id = ?`
	var name, startsAt string
	var stock, remaining int64
	var createdOK bool
	if err := db.QueryRowContext(ctx, qActivity, a.ID).Scan(&name, &stock, &remaining, &startsAt, &createdOK); err != nil {
		t.Fatal(err)
	}
	if name != "schema" || stock != 2 || remaining != 1 || startsAt != "2030-01-01 19:04:05.678000" || !createdOK {
		t.Errorf("activities row = %q %d %d %q %v (created_at in UTC: %v)", name, stock, remaining, startsAt, createdOK, createdOK)
	}

	const qOrder = `SELECT activity_id, user_id, status, DATE_FORMAT(created_at, '%Y-%m-%d %H:%i:%s.%f') FROM orders WHERE id = 11`
	var act, user int64
	var status, created string
	if err := db.QueryRowContext(ctx, qOrder).Scan(&act, &user, &status, &created); err != nil {
		t.Fatal(err)
	}
	if act != a.ID || user != 1 || status != "confirmed" || created != "2030-01-01 19:04:05.678000" {
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
	const qDuplicate = `INSERT INTO orders (id, activity_id, user_id, status, created_at) VALUES (13, ?, 1, 'confirmed', NOW(3))`
	if _, err := db.ExecContext(ctx, qDuplicate, a.ID); err == nil {
		t.Error("a second order of (activity, user) was accepted, want a UNIQUE violation")
	}
}

func TestConfig(t *testing.T) {
	for _, tt := range []struct {
		url, dsn string
	}{
		{"mysql://root@127.0.0.1:3306/shop",
			"root@tcp(127.0.0.1:3306)/shop?interpolateParams=true&parseTime=true&timeout=10s&time_zone=%27%2B00%3A00%27"},
		{"mysql://u:p%40ss%2Fw:rd@db.example/shop?readTimeout=5s&interpolateParams=false&loc=Local&parseTime=false",
			"u:p@ss/w:rd@tcp(db.example:3306)/shop?parseTime=true&readTimeout=5s&timeout=10s&time_zone=%27%2B00%3A00%27"},
		{"mysql://root@[::1]:3307/shop?time_zone=%27SYSTEM%27&charset=utf8mb4,utf8",
			"root@tcp([::1]:3307)/shop?charset=utf8mb4,utf8&interpolateParams=true&parseTime=true&timeout=10s&time_zone=%27SYSTEM%27"},
	} {
		cfg, err := mysql.Config(tt.url)
		if err != nil {
			t.Errorf("Config(%s): %v", tt.url, err)
			continue
		}
		if got := cfg.FormatDSN(); got != tt.dsn {
			t.Errorf("Config(%s) = %s\nwant %s", tt.url, got, tt.dsn)
		}
	}
	for _, tt := range []struct {
		url, want string
	}{
		{"mysql://root@127.0.0.1:3306", "no database name"},
		{"mysql:///shop", "no host"},
		{"mysql://root:secret@127.0.0.1:3306/shop?parseTime=maybe", "invalid bool"},
		{"mysql://root:secret@127.0.0.1:bad/shop", "invalid port"},
		{"postgres://root@127.0.0.1/shop", "scheme"},
	} {
		_, err := mysql.Config(tt.url)
		if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "secret") {
			t.Errorf("Config(%s) = %v, want an error about %q that hides the password", tt.url, err, tt.want)
		}
	}
}
