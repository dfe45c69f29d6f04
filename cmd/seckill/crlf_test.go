package main

import (
	"strconv"
	"strings"
	"testing"
)

// TestLineWatch: the watch finds a line of a request's head that ends in
// a bare LF, wherever the reads split the stream (every split in two, and
// a byte at a time), and says how much of the stream comes before that
// request; it never takes a body's LF for one, pipelined requests and
// bodies of known length included, and stops at a framing it does not
// follow.
func TestLineWatch(t *testing.T) {
	const get = "GET / HTTP/1.1\r\nHost: x\r\n\r\n"
	post := func(body string) string {
		return "POST /a HTTP/1.1\r\nHost: x\r\ncontent-length:  " + strconv.Itoa(len(body)) + " \r\n\r\n" + body
	}
	for _, c := range []struct {
		name   string
		stream string
		bad    string // the request with the bare LF, at the end of stream ("" for none)
	}{
		{"CRLF only, pipelined", get + get + get, ""},
		{"empty lines before the request line", "\r\n\r\n" + get, ""},
		{"bodies of known length with LFs", post("a\n\nb\n") + post("\n") + get, ""},
		{"a body with Expect", "POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n\n\n" + get, ""},
		{"a bare LF ending the request line", "", "GET / HTTP/1.1\nHost: x\r\n\r\n"},
		{"a bare LF ending a header", "", "GET / HTTP/1.1\r\nHost: x\nX: y\r\n\r\n"},
		{"bare LFs ending the head", "", "GET / HTTP/1.1\r\nHost: x\n\n"},
		{"a bare LF before the request line", "", "\nGET / HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"after pipelined requests", get + post("x\ny"), "GET / HTTP/1.1\r\nHost: x\n\n"},
		{"after a long header line", get, "GET / HTTP/1.1\r\nX-Pad: " + strings.Repeat("p", 200) + "\nHost: x\r\n\r\n"},
		// Framings the watch does not follow end it (a bare LF after
		// them is fasthttp's to read, as before).
		{"chunked", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n\n\n\n\r\n0\r\n\r\nGET / HTTP/1.1\nHost: x\n\n", ""},
		{"a Content-Length it cannot read", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2x\r\n\r\n\n\nGET / HTTP/1.1\nHost: x\n\n", ""},
		{"a Content-Length line longer than what a split keeps", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length:" + strings.Repeat(" ", 32) + "12\r\n\r\n" + strings.Repeat("\n", 12) + get, ""},
		{"two Content-Lengths", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 1\r\n\r\n\n\n\n", ""},
	} {
		stream := c.stream + c.bad
		lf := -1 // the first bare LF of the bad request
		if c.bad != "" {
			lf = len(c.stream) + strings.Index(strings.ReplaceAll(c.bad, "\r\n", "\r_"), "\n")
		}
		// Each split is the offsets where the reads begin.
		var splits [][]int
		for i := 1; i < len(stream); i++ {
			splits = append(splits, []int{0, i})
		}
		bytewise := make([]int, len(stream))
		for i := range bytewise {
			bytewise[i] = i
		}
		splits = append(splits, []int{0}, bytewise)
		for _, at := range splits {
			w := newLineWatch()
			start, found, whole := 0, false, 0
			for k := range at {
				start = at[k]
				end := len(stream)
				if k+1 < len(at) {
					end = at[k+1]
				}
				if n, bad := w.scan([]byte(stream[start:end])); bad {
					found, whole = true, n
					if lf < start || lf >= end {
						t.Errorf("%s, reads at %v: a bare LF in [%d,%d), want the one at %d", c.name, at[:min(len(at), 3)], start, end, lf)
					}
					break
				}
			}
			switch {
			case found != (c.bad != ""):
				t.Errorf("%s, split at %v: bare LF found %v, want %v", c.name, at[:min(len(at), 3)], found, c.bad != "")
			case found && start+whole != max(len(c.stream), start):
				t.Errorf("%s, split at %v: %d bytes before the refused request, want %d",
					c.name, at[:min(len(at), 3)], start+whole, max(len(c.stream), start))
			}
		}
	}
}

// BenchmarkLineWatch: what the watch costs a grab as wrk sends it (perf/
// grab.lua), read whole, and as loadgen sends it, its first byte read
// alone (fasthttp's read on a keep-alive connection).
func BenchmarkLineWatch(b *testing.B) {
	wrk := []byte("POST /api/v1/activities/1/grab HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nX-User-ID: 10000042\r\n\r\n")
	loadgen := []byte("POST /api/v1/activities/1/grab HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nUser-Agent: seckill-loadgen\r\n" +
		"Content-Length: 0\r\nX-User-ID: 10000042\r\n\r\n")
	b.Run("wrk", func(b *testing.B) {
		w := newLineWatch()
		for b.Loop() {
			w.scan(wrk)
		}
	})
	b.Run("loadgen", func(b *testing.B) {
		w := newLineWatch()
		for b.Loop() {
			w.scan(loadgen[:1])
			w.scan(loadgen[1:])
		}
	})
}

// FuzzLineWatch: whatever the bytes and wherever the reads split them, the
// watch does not panic, and it finds a bare LF in two reads exactly when
// it does in one, and places the bad request alike.
func FuzzLineWatch(f *testing.F) {
	for _, s := range []string{"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "GET / HTTP/1.1\nHost: x\n\n",
		"POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\na\nbGET / HTTP/1.1\r\nX: y\n\r\n"} {
		f.Add([]byte(s), uint16(5))
	}
	f.Fuzz(func(t *testing.T, stream []byte, at uint16) {
		one := newLineWatch()
		wantN, want := one.scan(stream)
		cut := int(at) % (len(stream) + 1)
		two := newLineWatch()
		n, got := two.scan(stream[:cut])
		where := n == wantN
		if !got {
			// What a read reports is counted in that read: 0 when the
			// bad request began in an earlier one.
			n, got = two.scan(stream[cut:])
			where = n > 0 && cut+n == wantN || n == 0 && wantN <= cut
		}
		if got != want || got && !where {
			t.Fatalf("split at %d of %q: bare LF %v (%d of the second read before it), in one read %v (%d before it)", cut, stream, got, n, want, wantN)
		}
	})
}
