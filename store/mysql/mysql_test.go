package mysql_test

import (
	"cmp"
	"context"
	gosql "database/sql"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seckilldev/seckill"
	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/store/internal/sqlstore"
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

	files, _ := filepath.Glob("migrations/*.sql")
	const q = `SELECT count(*) FROM schema_migrations`
	var n int
	if err := openStore(t, url).DB().QueryRowContext(context.Background(), q).Scan(&n); err != nil || n != len(files) || n < 2 {
		t.Errorf("schema_migrations holds %d rows (%v), want one per migration, %d", n, err, len(files))
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
	const qDuplicate = `INSERT INTO orders (id, activity_id, user_id, holder_user_id, status, created_at) VALUES (13, ?, 1, 1, 'paid', NOW(3))`
	if _, err := db.ExecContext(ctx, qDuplicate, a.ID); err == nil || !strings.Contains(err.Error(), "orders_activity_holder_key") {
		t.Errorf("a second live order of (activity, user) = %v, want a UNIQUE violation", err)
	}
	const qReturned = `INSERT INTO orders (id, activity_id, user_id, status, created_at) VALUES (13, ?, 1, 'cancelled', NOW(3))`
	if _, err := db.ExecContext(ctx, qReturned, a.ID); err != nil {
		t.Errorf("a returned order of a user holding another: %v, want it accepted", err)
	}
	for _, q := range []string{
		`INSERT INTO orders (id, activity_id, user_id, status, created_at) VALUES (15, ?, 2, 'confirmed', NOW(3))`,
		`INSERT INTO orders (id, activity_id, user_id, holder_user_id, status, created_at) VALUES (15, ?, 2, 3, 'confirmed', NOW(3))`,
		`INSERT INTO orders (id, activity_id, user_id, holder_user_id, status, created_at) VALUES (15, ?, 2, 2, 'pending', NOW(3))`,
	} {
		if _, err := db.ExecContext(ctx, q, a.ID); err == nil || !strings.Contains(strings.ToLower(err.Error()), "check") {
			t.Errorf("%s: %v, want a CHECK violation", q, err)
		}
	}

	// The foreign key holds for every statement but the batches' (whose
	// orders name an activity row that their transaction updates).
	for _, q := range []string{
		`INSERT INTO orders (id, activity_id, user_id, holder_user_id, status, created_at) VALUES (14, 999999, 1, 1, 'confirmed', NOW(3))`,
		`DELETE FROM activities WHERE id = ?`,
	} {
		if _, err := db.ExecContext(ctx, q, sqlArgs(q, a.ID)...); err == nil || !strings.Contains(err.Error(), "orders_activity_id_fkey") {
			t.Errorf("%s: %v, want a foreign key violation", q, err)
		}
	}
	if _, err := s.ApplyOrders(ctx, []seckill.OrderRequest{{OrderID: 16, ActivityID: 999999, UserID: 1}}); err != nil {
		t.Errorf("an order of an activity that does not exist: %v, want it failed as sold out", err)
	}
	checkNoOrder(t, db, 16)
}

// sqlArgs returns the arguments of q: the activity id if it takes one.
func sqlArgs(q string, activityID int64) []any {
	if strings.Contains(q, "?") {
		return []any{activityID}
	}
	return nil
}

// checkNoOrder fails unless orders has no row of id.
func checkNoOrder(t *testing.T, db *gosql.DB, id int64) {
	t.Helper()
	var n int
	if err := db.QueryRowContext(context.Background(), `SELECT COUNT(*) FROM orders WHERE id = ?`, id).Scan(&n); err != nil || n != 0 {
		t.Errorf("orders holds %d rows of id %d (%v), want none", n, id, err)
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

func TestUpgrade(t *testing.T) {
	ctx, url := context.Background(), testenv.MySQLURL(t)
	storetest.RunUpgrade(t, storetest.Upgrade{
		OpenAt: func(version string) (seckill.Store, error) { return mysql.OpenAt(ctx, url, version) },
		Exec: func(old seckill.Store, q string, args ...any) error {
			_, err := old.(*mysql.Store).DB().ExecContext(ctx, q, args...)
			return err
		},
		Open: func() seckill.Store { return openStore(t, url) },
	})
}

// TestUpgradeRerun: MySQL commits DDL statement by statement, so a
// migration that failed halfway runs again from the top. After each
// statement of 0002, the rest failing: opening the store again runs 0002
// whole, and the schema is the one 0002 gives in one go.
func TestUpgradeRerun(t *testing.T) {
	ctx := context.Background()
	want := schema(t, openStore(t, testenv.MySQLURL(t)).DB())
	file, err := os.ReadFile("migrations/0002_lifecycle.sql")
	if err != nil {
		t.Fatal(err)
	}
	stmts := strings.SplitAfter(string(file), ";\n")
	for k := 1; k < len(stmts); k++ {
		if !strings.Contains(stmts[k-1], "EXECUTE") && !strings.Contains(stmts[k-1], "UPDATE") {
			continue // the next statement only prepares
		}
		url := testenv.MySQLURL(t)
		old, err := mysql.OpenAt(ctx, url, "0001_init")
		if err != nil {
			t.Fatal(err)
		}
		old.Close()
		cfg, err := mysql.Config(url)
		if err != nil {
			t.Fatal(err)
		}
		cfg.MultiStatements = true
		db, err := gosql.Open("mysql", cfg.FormatDSN())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, strings.Join(stmts[:k], "")); err != nil {
			t.Fatalf("the first %d statements of 0002: %v", k, err)
		}
		db.Close()
		t.Logf("0002 failing after statement %d of %d, then run again", k, len(stmts)-1)
		if got := schema(t, openStore(t, url).DB()); got != want {
			t.Errorf("after %d statements and a rerun, the schema is\n%s\nwant\n%s", k, got, want)
		}
	}
}

// schema returns the definitions of the store's tables.
func schema(t *testing.T, db *gosql.DB) string {
	t.Helper()
	var all []string
	for _, table := range []string{"activities", "orders", "order_failures", "order_returns", "fences"} {
		var name, def string
		if err := db.QueryRow("SHOW CREATE TABLE "+table).Scan(&name, &def); err != nil {
			t.Fatal(err)
		}
		all = append(all, regexp.MustCompile(` AUTO_INCREMENT=\d+`).ReplaceAllString(def, ""))
	}
	return strings.Join(all, "\n")
}

// TestPlans: with 100,000 orders, of which 1% await payment, expiry and the
// outbox read one index range; no full scan, no filesort.
func TestPlans(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, testenv.MySQLURL(t))
	db := s.DB()
	a := seckill.Activity{Name: "plans", Stock: seckill.MaxStock, StartsAt: time.Now(), EndsAt: time.Now().Add(time.Hour), PayWithin: time.Hour}
	if err := s.CreateActivity(ctx, &a); err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Recursion bounds: MariaDB's, then MySQL 8's (each server refuses the
	// other's).
	_, _ = conn.ExecContext(ctx, "SET SESSION max_recursive_iterations = 1000000")
	_, _ = conn.ExecContext(ctx, "SET SESSION cte_max_recursion_depth = 1000000")
	for _, q := range []string{
		`INSERT INTO orders (id, activity_id, user_id, holder_user_id, status, created_at, pay_by, paid_at)
		 WITH RECURSIVE n (i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100000)
		 SELECT i, ?, i, i, IF(i % 100 = 0, 'confirmed', 'paid'), NOW(3), NOW(3) + INTERVAL i * 1000 MICROSECOND, IF(i % 100 = 0, NULL, NOW(3))
		 FROM n`,
		`INSERT INTO order_returns (order_id, activity_id, user_id, status, returned_at, restocked_at)
		 SELECT id, activity_id, user_id, 'cancelled', NOW(3), IF(id % 1000 = 0, NULL, NOW(3))
		 FROM orders WHERE id % 100 = 1`,
		`ANALYZE TABLE orders, order_returns`,
	} {
		var args []any
		if strings.Contains(q, "?") {
			args = []any{a.ID}
		}
		if _, err := conn.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	for _, tt := range storetest.IndexedQueries(time.Now().Add(time.Minute)) {
		rows, err := db.QueryContext(ctx, "EXPLAIN "+tt.Query, tt.Args...)
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rows.Columns()
		var plan []string
		for rows.Next() {
			vals := make([]gosql.NullString, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			var line []string
			for i, c := range cols {
				line = append(line, c+"="+vals[i].String)
			}
			plan = append(plan, strings.Join(line, " "))
		}
		rows.Close()
		got := strings.Join(plan, "\n")
		t.Logf("EXPLAIN %s\n%s", strings.TrimSpace(tt.Query), got)
		first := plan[0]
		if !strings.Contains(first, "key="+tt.Index) || strings.Contains(got, "type=ALL") || strings.Contains(got, "filesort") {
			t.Errorf("plan of %s does not read %s alone", tt.Query, tt.Index)
		}
	}
}

// isMariaDB tells whether the test server is MariaDB.
func isMariaDB(t *testing.T, db *gosql.DB) bool {
	server, err := mysql.ServerOf(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	return server == "mariadb"
}

// The two ways the store ends a session idle in a transaction: MariaDB's
// idle_transaction_timeout, and MySQL's wait_timeout (which MariaDB has
// too, so both run on MariaDB; the first is skipped on MySQL).
var idleTxCases = []struct {
	server, variable string
	open             func(ctx context.Context, url string) (*mysql.Store, error)
	// values a URL may give the variable (wait_timeout has no "none")
	values []string
}{
	{"mariadb", "idle_transaction_timeout", mysql.Open, []string{"0", "600"}},
	{"mysql", "wait_timeout", mysql.OpenAsMySQL, []string{"600"}},
}

func openCase(t *testing.T, open func(ctx context.Context, url string) (*mysql.Store, error), url string) *mysql.Store {
	t.Helper()
	s, err := open(context.Background(), url)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestStalledTransaction(t *testing.T) {
	for _, c := range idleTxCases {
		t.Run(c.server, func(t *testing.T) {
			s := openCase(t, c.open, testenv.WithParam(t, testenv.MySQLURL(t), c.variable, "1"))
			if c.server == "mariadb" && !isMariaDB(t, s.DB()) {
				t.Skip("MySQL has no idle_transaction_timeout")
			}
			storetest.RunStalledTransaction(t, s, func(ctx context.Context, id int64) (func() error, error) {
				tx, err := s.DB().BeginTx(ctx, nil)
				if err != nil {
					return nil, err
				}
				if _, err := tx.ExecContext(ctx, `SELECT id FROM activities WHERE id = ? FOR UPDATE`, id); err != nil {
					tx.Rollback()
					return nil, err
				}
				return tx.Commit, nil
			})
		})
	}
}

// TestIdleTxTimeout: the store's sessions end when idle in a transaction
// for sqlstore.IdleTxTimeout, through the server's variable, unless the
// URL sets that variable.
func TestIdleTxTimeout(t *testing.T) {
	want := strconv.Itoa(int(sqlstore.IdleTxTimeout.Seconds()))
	for _, c := range idleTxCases {
		t.Run(c.server, func(t *testing.T) {
			for _, param := range append([]string{""}, c.values...) {
				url := testenv.MySQLURL(t)
				if param != "" {
					url = testenv.WithParam(t, url, c.variable, param)
				}
				s := openCase(t, c.open, url)
				if c.server == "mariadb" && !isMariaDB(t, s.DB()) {
					t.Skip("MySQL has no idle_transaction_timeout")
				}
				var name, got string
				if err := s.DB().QueryRowContext(context.Background(), `SHOW SESSION VARIABLES LIKE '`+c.variable+`'`).Scan(&name, &got); err != nil {
					t.Fatal(err)
				}
				if w := cmp.Or(param, want); got != w {
					t.Errorf("URL parameter %q: %s = %q, want %q", param, c.variable, got, w)
				}
			}
		})
	}
}
