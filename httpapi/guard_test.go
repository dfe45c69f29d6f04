package httpapi

import (
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"
)

// TestClientAddr: X-Forwarded-For counts only behind a trusted proxy, and
// then only up to the first address no trusted proxy added.
func TestClientAddr(t *testing.T) {
	s := &Server{trusted: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}}
	cases := []struct {
		peer string
		xff  []string
		want string
	}{
		{"203.0.113.5:1000", nil, "203.0.113.5"},
		{"203.0.113.5:1000", []string{"1.2.3.4"}, "203.0.113.5"}, // an untrusted peer's header is ignored
		{"10.0.0.1:1000", nil, "10.0.0.1"},
		{"10.0.0.1:1000", []string{"1.2.3.4"}, "1.2.3.4"},
		{"10.0.0.1:1000", []string{"6.6.6.6, 1.2.3.4"}, "1.2.3.4"},           // the client's own claim is left of it
		{"10.0.0.1:1000", []string{"6.6.6.6, 1.2.3.4, 10.0.0.2"}, "1.2.3.4"}, // two trusted hops
		{"10.0.0.1:1000", []string{"6.6.6.6", "1.2.3.4"}, "1.2.3.4"},         // headers in order
		{"10.0.0.1:1000", []string{"1.2.3.4", "10.0.0.9"}, "1.2.3.4"},        // a trusted hop in a second header
		{"10.0.0.1:1000", []string{"junk, 10.0.0.7"}, "10.0.0.7"},            // garbage stops at the hop that passed it
		{"10.0.0.1:1000", []string{"1.2.3.4:5678"}, "1.2.3.4"},               // with a port
		{"10.0.0.1:1000", []string{" , ,"}, "10.0.0.1"},                      // empty entries
		{"10.0.0.1:1000", []string{"10.0.0.3, 10.0.0.2"}, "10.0.0.3"},        // all trusted: the leftmost
		{"[::ffff:10.0.0.1]:1000", []string{"::ffff:1.2.3.4"}, "1.2.3.4"},    // mapped addresses
		{"[2001:db8:1:2:3:4:5:6]:1000", nil, "2001:db8:1:2::"},               // IPv6 by its /64
		{"[::1]:1000", []string{"2001:db8:1:2:aaaa::1"}, "2001:db8:1:2::"},
		{"not an address", []string{"1.2.3.4"}, "invalid IP"},
	}
	for _, c := range cases {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = c.peer
		for _, v := range c.xff {
			r.Header.Add("X-Forwarded-For", v)
		}
		if got := s.clientAddr(r).String(); got != c.want {
			t.Errorf("peer %s, X-Forwarded-For %q: got %s, want %s", c.peer, c.xff, got, c.want)
		}
	}
}

func TestCleanPath(t *testing.T) {
	for p, want := range map[string]bool{
		"/": true, "/api/v1/activities/1": true, "/api/v1/activities/": true,
		"": false, "x": false, "//api": false, "/api//v1": false, "/api/./v1": false, "/api/../api": false, "/api/..": false,
	} {
		if got := cleanPath(p); got != want {
			t.Errorf("cleanPath(%q) = %v, want %v", p, got, want)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	for wait, want := range map[time.Duration]string{0: "1", time.Millisecond: "1", time.Second: "1", 1001 * time.Millisecond: "2", time.Minute: "60"} {
		if got := retryAfter(wait); got != want {
			t.Errorf("retryAfter(%v) = %s, want %s", wait, got, want)
		}
	}
}

// TestLoneSurrogate: an escaped surrogate is refused unless it is half of
// a pair; a backslash escaped before "ud800" is not an escape of it.
func TestLoneSurrogate(t *testing.T) {
	for body, want := range map[string]bool{
		`{"name":"\ud800"}`: true, `{"name":"\uDFFF"}`: true, `{"name":"a\ud83d"}`: true, `{"name":"\ud83d\u0041"}`: true,
		`{"name":"\ude00\ud83d"}`: true, `"\ud83d\ude00\ud800"`: true, `"\ud83d\`: true,
		`{"name":"\ud83d\ude00"}`: false, `{"name":"\u00e9\uD83D\uDE00x"}`: false, `{"name":"\\ud800"}`: false,
		`{"name":"\\\ud83d\ude00"}`: false, `{"name":"\ufffd"}`: false, `{"name":"\uzzzz"}`: false, `"\`: false, ``: false,
	} {
		if got := loneSurrogate([]byte(body)); got != want {
			t.Errorf("loneSurrogate(%s) = %v, want %v", body, got, want)
		}
	}
}
