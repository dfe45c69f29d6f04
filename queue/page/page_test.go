package page_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/seckilldev/seckill/queue/page"
)

func TestHandler(t *testing.T) {
	h := page.Handler()
	for _, c := range []struct {
		method, path string
		status       int
		typ          string
	}{
		{"GET", "/queue/", 200, "text/html"},
		{"GET", "/queue/page.js", 200, "text/javascript"},
		{"HEAD", "/queue/page.css", 200, "text/css"},
		{"GET", "/queue/nope.js", 404, "application/json"},
		{"GET", "/queue/assets/page.js", 404, "application/json"},
		{"POST", "/queue/", 405, "application/json"},
		{"GET", "/queue?activity=3", 301, ""},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(c.method, c.path, nil))
		if rec.Code != c.status || !strings.HasPrefix(rec.Header().Get("Content-Type"), c.typ) {
			t.Errorf("%s %s: %d %q, want %d %q", c.method, c.path, rec.Code, rec.Header().Get("Content-Type"), c.status, c.typ)
		}
		if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
			t.Errorf("%s %s: Content-Security-Policy %q", c.method, c.path, csp)
		}
		if c.status == http.StatusMovedPermanently && rec.Header().Get("Location") != "/queue/?activity=3" {
			t.Errorf("%s %s: Location %q", c.method, c.path, rec.Header().Get("Location"))
		}
		if c.status == http.StatusMethodNotAllowed && rec.Header().Get("Allow") != "GET, HEAD" {
			t.Errorf("%s %s: Allow %q", c.method, c.path, rec.Header().Get("Allow"))
		}
	}
}
