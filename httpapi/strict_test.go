package httpapi_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestStrictEdges: one rule for each place where another parser could read
// a request otherwise than the API (strict.go), each refused with its
// status and code, and what it names left as it was.
func TestStrictEdges(t *testing.T) {
	a := newFuzzAPI(t, sqliteURL(t))
	now := time.Now().UTC()
	ts := func(d time.Duration) string { return now.Add(d).Format(time.RFC3339) }
	sale := func(fields string) string {
		return `{"name":"x","stock":5,"starts_at":"` + ts(-time.Minute) + `","ends_at":"` + ts(time.Hour) + `"` + fields + `}`
	}
	named := func(name string) string {
		return `{"name":` + name + `,"stock":5,"starts_at":"` + ts(-time.Minute) + `","ends_at":"` + ts(time.Hour) + `"}`
	}
	admin := http.Header{"Authorization": {"Bearer " + fuzzToken}, "Content-Type": {"application/json"}}
	adminOnly := http.Header{"Authorization": {"Bearer " + fuzzToken}}
	buyer := func(uid string, kv ...string) http.Header {
		h := http.Header{"X-User-Id": {uid}}
		for i := 0; i < len(kv); i += 2 {
			h.Add(kv[i], kv[i+1])
		}
		return h
	}
	grab := fmt.Sprintf("/api/v1/activities/%d/grab", a.open)
	const chunked = -1
	for _, c := range []struct {
		name         string
		method, path string
		header       http.Header
		body         string
		length       int64 // chunked, or 0: the body's
		status       int
		code, says   string
	}{
		// JSON keys, as encoding/json reads them leniently.
		{"a key twice", "POST", "/api/v1/activities", admin, sale(`,"stock":6`), 0, 400, "invalid_argument", `"stock" appears twice`},
		{"a key twice, once escaped", "POST", "/api/v1/activities", admin, sale(`,"n\u0061me":"y"`), 0, 400, "invalid_argument", `"name" appears twice`},
		{"a key twice in an inner object", "POST", "/api/v1/activities", admin, sale(`,"rebuy":{"a":1,"a":2}`), 0, 400, "invalid_argument", `"a" appears twice`},
		{"a name in capitals", "POST", "/api/v1/activities", admin, strings.Replace(sale(""), `"name"`, `"NAME"`, 1), 0, 400, "invalid_argument", `case-sensitive (the field is "name")`},
		{"a name with the Kelvin sign", "POST", "/api/v1/activities", admin, strings.Replace(sale(""), `"stock"`, `"stoc\u212a"`, 1), 0, 400, "invalid_argument", "unknown field"},
		// Names.
		{"a blank name", "POST", "/api/v1/activities", admin, named(`"   "`), 0, 400, "invalid_argument", "blank"},
		{"a name of a no-break space", "POST", "/api/v1/activities", admin, named(`"\u00a0\u3000"`), 0, 400, "invalid_argument", "blank"},
		{"a bidi override", "POST", "/api/v1/activities", admin, named(`"a\u202eb"`), 0, 400, "invalid_argument", "format characters"},
		{"a zero-width space", "POST", "/api/v1/activities", admin, named(`"a\u200bb"`), 0, 400, "invalid_argument", "format characters"},
		{"a line separator", "POST", "/api/v1/activities", admin, named(`"a\u2028b"`), 0, 400, "invalid_argument", "line separators"},
		{"a control character", "POST", "/api/v1/activities", admin, named(`"a\u0007b"`), 0, 400, "invalid_argument", "control"},
		{"a name with joiners", "POST", "/api/v1/activities", admin, named(`"family \ud83d\udc68\u200d\ud83d\udc69\u200d\ud83d\udc67, \u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645"`), 0, 201, "", ""},
		// Times.
		{"no starts_at", "POST", "/api/v1/activities", admin, `{"name":"x","stock":5,"ends_at":"` + ts(time.Hour) + `"}`, 0, 400, "invalid_argument", "starts_at and ends_at are required"},
		{"starts_at the zero time", "POST", "/api/v1/activities", admin, `{"name":"x","stock":5,"starts_at":"0001-01-01T00:00:00Z","ends_at":"` + ts(time.Hour) + `"}`, 0, 400, "invalid_argument", "starts_at 0001-01-01T00:00:00Z is out of range"},
		{"ended already", "POST", "/api/v1/activities", admin, `{"name":"x","stock":5,"starts_at":"` + ts(-2*time.Hour) + `","ends_at":"` + ts(-time.Hour) + `"}`, 0, 400, "invalid_argument", "in the past"},
		// Headers.
		{"Content-Type twice", "POST", "/api/v1/activities", http.Header{"Authorization": {"Bearer " + fuzzToken}, "Content-Type": {"text/plain", "application/json"}}, sale(""), 0, 400, "invalid_argument", "Content-Type header must be sent once"},
		// Bodies where none is taken, whatever their type.
		{"a grab with an XML body", "POST", grab, buyer("201", "Content-Type", "application/xml"), "<a/>", 0, 415, "unsupported_media_type", "takes no body"},
		{"a grab with a body that is not JSON", "POST", grab, buyer("202", "Content-Type", "application/json"), "not json", 0, 415, "unsupported_media_type", "takes no body"},
		{"a grab with {}", "POST", grab, buyer("203", "Content-Type", "application/json"), "{}", 0, 415, "unsupported_media_type", "takes no body"},
		{"a grab with a chunked body", "POST", grab, buyer("204"), "x", chunked, 415, "unsupported_media_type", "takes no body"},
		{"a grab with Content-Length: 0", "POST", grab, buyer("205", "Content-Type", "text/plain"), "", 0, 202, "", ""},
		{"a grab with an empty chunked body", "POST", grab, buyer("206"), "", chunked, 202, "", ""},
		{"a cancel with a body", "POST", "/api/v1/orders/" + a.orderStr + "/cancel", buyer("1", "Content-Type", "text/plain"), "hi", 0, 415, "unsupported_media_type", "takes no body"},
		{"a block with a body", "PUT", "/api/v1/blocks/999", http.Header{"Authorization": {"Bearer " + fuzzToken}, "Content-Type": {"text/plain"}}, "hi", 0, 415, "unsupported_media_type", "takes no body"},
		{"a GET with a body", "GET", fmt.Sprintf("/api/v1/activities/%d", a.open), http.Header{"Content-Type": {"application/json"}}, "{}", 0, 415, "unsupported_media_type", "takes no body"},
		// Queries.
		{"a query parameter twice", "GET", "/api/v1/users/me/orders?limit=1&limit=2", buyer("1"), "", 0, 400, "invalid_argument", `"limit" is sent more than once`},
		{"a query parameter twice on a grab", "POST", grab + "?a=1&a=2", buyer("207"), "", 0, 400, "invalid_argument", `"a" is sent more than once`},
		{"a query with a semicolon", "GET", "/api/v1/users/me/orders?limit=1;limit=2", buyer("1"), "", 0, 400, "invalid_argument", "malformed"},
		{"a query once", "GET", "/api/v1/users/me/orders?limit=1", buyer("1"), "", 0, 200, "", ""},
		// Paths, matched as sent.
		{"an encoded id", "GET", "/api/v1/activities/%31", nil, "", 0, 404, "not_found", ""},
		{"an encoded letter", "GET", fmt.Sprintf("/api/v1/%%61ctivities/%d", a.open), nil, "", 0, 404, "not_found", ""},
		{"an encoded grab", "POST", fmt.Sprintf("/api/v1/activities/%d/gr%%61b", a.open), buyer("208"), "", 0, 404, "not_found", ""},
		{"an encoded path of the blocklist", "PUT", "/api/v1/blocks/99%39", adminOnly, "", 0, 404, "not_found", ""},
	} {
		req := httptest.NewRequest(c.method, c.path, strings.NewReader(c.body))
		if c.length == chunked {
			req.ContentLength = -1
		}
		if c.header != nil {
			req.Header = c.header
		}
		rec := httptest.NewRecorder()
		a.h.ServeHTTP(rec, req)
		var e struct {
			Error struct{ Code, Message string }
		}
		_ = json.Unmarshal(rec.Body.Bytes(), &e)
		if rec.Code != c.status || e.Error.Code != c.code || !strings.Contains(e.Error.Message, c.says) {
			t.Errorf("%s: %d %s; want %d %s saying %q", c.name, rec.Code, rec.Body.Bytes(), c.status, c.code, c.says)
		}
	}
	// Nothing refused was done: the fixtures' four activities and the
	// one with joiners; user 1's order not cancelled; user 999 and 9999
	// not blocked.
	var n int
	if err := a.db.QueryRow(`SELECT count(*) FROM activities`).Scan(&n); err != nil || n != 5 {
		t.Errorf("activities: %d (%v), want 5", n, err)
	}
	if a.blocklist.Blocked(999) || a.blocklist.Blocked(9999) {
		t.Error("a refused PUT blocked its user")
	}
	req := httptest.NewRequest("GET", "/api/v1/orders/"+a.orderStr, nil)
	req.Header.Set("X-User-Id", "1")
	rec := httptest.NewRecorder()
	a.h.ServeHTTP(rec, req)
	if b, _ := io.ReadAll(rec.Body); rec.Code != 200 || strings.Contains(string(b), "cancelled") {
		t.Errorf("user 1's order after a refused cancel: %d %s", rec.Code, b)
	}
}
