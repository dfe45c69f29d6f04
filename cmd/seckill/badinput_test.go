package main

import (
	"database/sql"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/store"
)

// sqlDB opens a database URL for direct SQL in tests.
func sqlDB(url string) (*sql.DB, error) { return store.SQL(url) }

// TestBadInput: every endpoint answers bad input with a 4xx and the right
// code, never a 5xx, and changes nothing.
func TestBadInput(t *testing.T) {
	be := backend{"postgres", redisURL(t), ""}
	be.dbURL = testenv.PostgresURL(t)
	in := startServe(t, be, testenv.Prefix(t))
	open := in.createActivity(5, 0)
	later := in.createActivity(5, time.Hour)
	okGrab := in.grab(open, 1)
	if okGrab.status != http.StatusAccepted {
		t.Fatalf("grab: %d %v", okGrab.status, okGrab.body)
	}
	oid := okGrab.body["order_id"].(string)

	now := time.Now()
	ts := func(d time.Duration) string { return now.Add(d).Format(time.RFC3339) }
	valid := func(mod string) string {
		return `{"name":"x","stock":5,"starts_at":"` + ts(0) + `","ends_at":"` + ts(time.Hour) + `"` + mod + `}`
	}
	admin := in.admin()
	noAuth := map[string]string{"Content-Type": "application/json"}
	badAuth := map[string]string{"Authorization": "Bearer wrong", "Content-Type": "application/json"}
	grabPath := fmt.Sprintf("/api/v1/activities/%d/grab", open)
	cases := []struct {
		name, method, path string
		headers            map[string]string
		body               string
		status             int
		code               string
	}{
		{"create without token", "POST", "/api/v1/activities", noAuth, valid(""), 401, "unauthorized"},
		{"create with a wrong token", "POST", "/api/v1/activities", badAuth, valid(""), 401, "unauthorized"},
		{"create with a basic auth header", "POST", "/api/v1/activities", map[string]string{"Authorization": "Basic " + in.token}, valid(""), 401, "unauthorized"},
		{"empty body", "POST", "/api/v1/activities", admin, "", 400, "invalid_argument"},
		{"not JSON", "POST", "/api/v1/activities", admin, "stock=5", 400, "invalid_argument"},
		{"truncated JSON", "POST", "/api/v1/activities", admin, `{"name":"x",`, 400, "invalid_argument"},
		{"unknown field", "POST", "/api/v1/activities", admin, valid(`,"stok":5`), 400, "invalid_argument"},
		{"two JSON values", "POST", "/api/v1/activities", admin, valid("") + "{}", 400, "invalid_argument"},
		{"stock as string", "POST", "/api/v1/activities", admin, `{"name":"x","stock":"5","starts_at":"` + ts(0) + `","ends_at":"` + ts(time.Hour) + `"}`, 400, "invalid_argument"},
		{"stock zero", "POST", "/api/v1/activities", admin, strings.Replace(valid(""), `"stock":5`, `"stock":0`, 1), 400, "invalid_argument"},
		{"stock negative", "POST", "/api/v1/activities", admin, strings.Replace(valid(""), `"stock":5`, `"stock":-3`, 1), 400, "invalid_argument"},
		{"stock absurd", "POST", "/api/v1/activities", admin, strings.Replace(valid(""), `"stock":5`, `"stock":1000000000000`, 1), 400, "invalid_argument"},
		{"stock beyond int64", "POST", "/api/v1/activities", admin, strings.Replace(valid(""), `"stock":5`, `"stock":99999999999999999999`, 1), 400, "invalid_argument"},
		{"buckets zero", "POST", "/api/v1/activities", admin, valid(`,"buckets":0`), 400, "invalid_argument"},
		{"buckets negative", "POST", "/api/v1/activities", admin, valid(`,"buckets":-2`), 400, "invalid_argument"},
		{"buckets above 256", "POST", "/api/v1/activities", admin, valid(`,"buckets":257`), 400, "invalid_argument"},
		{"buckets beyond int", "POST", "/api/v1/activities", admin, valid(`,"buckets":99999999999999999999`), 400, "invalid_argument"},
		{"buckets as string", "POST", "/api/v1/activities", admin, valid(`,"buckets":"16"`), 400, "invalid_argument"},
		{"buckets fractional", "POST", "/api/v1/activities", admin, valid(`,"buckets":1.5`), 400, "invalid_argument"},
		{"stock fractional", "POST", "/api/v1/activities", admin, strings.Replace(valid(""), `"stock":5`, `"stock":1.5`, 1), 400, "invalid_argument"},
		{"empty name", "POST", "/api/v1/activities", admin, strings.Replace(valid(""), `"name":"x"`, `"name":""`, 1), 400, "invalid_argument"},
		{"long name", "POST", "/api/v1/activities", admin, strings.Replace(valid(""), `"name":"x"`, `"name":"`+strings.Repeat("x", 300)+`"`, 1), 400, "invalid_argument"},
		{"end before start", "POST", "/api/v1/activities", admin, `{"name":"x","stock":5,"starts_at":"` + ts(time.Hour) + `","ends_at":"` + ts(0) + `"}`, 400, "invalid_argument"},
		{"end equals start", "POST", "/api/v1/activities", admin, `{"name":"x","stock":5,"starts_at":"` + ts(0) + `","ends_at":"` + ts(0) + `"}`, 400, "invalid_argument"},
		{"missing times", "POST", "/api/v1/activities", admin, `{"name":"x","stock":5}`, 400, "invalid_argument"},
		{"bad time", "POST", "/api/v1/activities", admin, `{"name":"x","stock":5,"starts_at":"tomorrow","ends_at":"` + ts(time.Hour) + `"}`, 400, "invalid_argument"},
		{"year 0001", "POST", "/api/v1/activities", admin, `{"name":"x","stock":5,"starts_at":"0001-01-01T00:00:00Z","ends_at":"` + ts(time.Hour) + `"}`, 400, "invalid_argument"},
		{"huge body", "POST", "/api/v1/activities", admin, `{"name":"` + strings.Repeat("x", 100<<10) + `"}`, 413, "too_large"},
		{"wrong method on activities", "DELETE", "/api/v1/activities", admin, "", 405, "method_not_allowed"},
		{"activity id not a number", "GET", "/api/v1/activities/abc", nil, "", 400, "invalid_argument"},
		{"activity id zero", "GET", "/api/v1/activities/0", nil, "", 400, "invalid_argument"},
		{"activity id negative", "GET", "/api/v1/activities/-1", nil, "", 400, "invalid_argument"},
		{"activity id too big", "GET", "/api/v1/activities/99999999999999999999", nil, "", 400, "invalid_argument"},
		{"unknown activity", "GET", "/api/v1/activities/999999", nil, "", 404, "not_found"},
		{"grab without user", "POST", grabPath, nil, "", 400, "invalid_argument"},
		{"grab with user abc", "POST", grabPath, map[string]string{"X-User-ID": "abc"}, "", 400, "invalid_argument"},
		{"grab with user 0", "POST", grabPath, map[string]string{"X-User-ID": "0"}, "", 400, "invalid_argument"},
		{"grab with negative user", "POST", grabPath, map[string]string{"X-User-ID": "-5"}, "", 400, "invalid_argument"},
		{"grab with padded user", "POST", grabPath, map[string]string{"X-User-ID": "007"}, "", 400, "invalid_argument"},
		{"grab with fractional user", "POST", grabPath, map[string]string{"X-User-ID": "1.5"}, "", 400, "invalid_argument"},
		{"grab with huge user", "POST", grabPath, map[string]string{"X-User-ID": "9223372036854775808"}, "", 400, "invalid_argument"},
		{"grab with GET", "GET", grabPath, user(2), "", 405, "method_not_allowed"},
		{"grab of unknown activity", "POST", "/api/v1/activities/999999/grab", user(2), "", 404, "not_found"},
		{"grab of bad activity id", "POST", "/api/v1/activities/x/grab", user(2), "", 400, "invalid_argument"},
		{"grab before start", "POST", fmt.Sprintf("/api/v1/activities/%d/grab", later), user(2), "", 403, "not_started"},
		{"order id not a number", "GET", "/api/v1/orders/abc", user(1), "", 400, "invalid_argument"},
		{"order without user", "GET", "/api/v1/orders/" + oid, nil, "", 400, "invalid_argument"},
		{"order of another user", "GET", "/api/v1/orders/" + oid, user(2), "", 404, "not_found"},
		{"unknown order", "GET", "/api/v1/orders/12345", user(1), "", 404, "not_found"},
		{"order with a wrong token", "GET", "/api/v1/orders/" + oid, map[string]string{"Authorization": "Bearer wrong"}, "", 401, "unauthorized"},
		{"unknown path", "GET", "/api/v2/whatever", nil, "", 404, "not_found"},
	}
	for _, c := range cases {
		r := in.do(c.method, c.path, c.headers, c.body)
		if r.status != c.status || r.code() != c.code {
			t.Errorf("%s: got %d %q %v, want %d %q", c.name, r.status, r.code(), r.body, c.status, c.code)
		}
		if r.status >= 500 {
			t.Errorf("%s: server error %d", c.name, r.status)
		}
	}
	// Nothing changed: two activities, one order, remaining as before.
	db, err := sqlDB(be.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var acts int
	if err := db.QueryRow(`SELECT count(*) FROM activities`).Scan(&acts); err != nil || acts != 2 {
		t.Errorf("activities: got %d (%v), want 2", acts, err)
	}
	in.waitOrders(map[string]int64{oid: 1})
	var orders int
	if err := db.QueryRow(`SELECT count(*) FROM orders`).Scan(&orders); err != nil || orders != 1 {
		t.Errorf("orders: got %d (%v), want 1", orders, err)
	}
	if got := in.activity(open)["remaining"].(float64); got != 4 {
		t.Errorf("remaining: got %v, want 4", got)
	}
	// The owner and the admin see the order.
	if r := in.do("GET", "/api/v1/orders/"+oid, user(1), ""); r.status != 200 || r.body["status"] != "confirmed" {
		t.Errorf("owner's view: %d %v", r.status, r.body)
	}
	if r := in.do("GET", "/api/v1/orders/"+oid, map[string]string{"Authorization": "Bearer " + in.token}, ""); r.status != 200 || r.body["user_id"] != "1" {
		t.Errorf("admin's view: %d %v", r.status, r.body)
	}
}
