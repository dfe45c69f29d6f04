package loadgen_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/seckilldev/seckill/loadgen"
)

// TestToken: with Config.Token, every grab names its user by a bearer
// token, never by X-User-ID, on both clients.
func TestToken(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet { // warm-up
			loadgen.BaselineHandler(w, r)
			return
		}
		uid, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer token-of-")
		if !ok || len(r.Header["X-User-Id"]) > 0 {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		r.Header.Set("X-User-Id", uid) // the baseline answers with it as the order
		loadgen.BaselineHandler(w, r)
	}))
	defer srv.Close()
	for _, c := range clients {
		t.Run(c.name, func(t *testing.T) {
			rep, err := loadgen.Run(context.Background(), loadgen.Config{URL: srv.URL, ActivityID: 1, Users: 500,
				Concurrency: 8, NetHTTP: c.netHTTP,
				Token: func(uid int64) (string, error) { return "token-of-" + strconv.FormatInt(uid, 10), nil }})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Counts.Accepted != 500 || rep.UsersWithOrder != 500 {
				t.Errorf("accepted %d, users with an order %d; want 500 each: %v %v", rep.Counts.Accepted, rep.UsersWithOrder, rep.Status, rep.Samples)
			}
			for uid, oids := range rep.OrdersByUser() {
				if len(oids) != 1 || oids[0] != uid {
					t.Fatalf("user %d told %v, want their own id", uid, oids)
				}
			}
		})
	}
}
