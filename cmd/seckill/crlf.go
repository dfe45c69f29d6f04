package main

import (
	"bytes"
	"strconv"
)

// fasthttp ends a request's lines at a bare LF as well as at CRLF, except
// the empty line that ends the headers: "GET / HTTP/1.1\nHost: x\r\n\r\n"
// is served, and "GET / HTTP/1.1\nHost: x\n\n" waits for a CRLF that never
// comes, to get 408 after --read-header-timeout. No option of fasthttp's
// changes that, so serve's connections watch for a bare LF themselves
// (lineWatch, in lingerConn.Read): a request line or header line that ends
// in one is answered 400 at once and the connection closed, before
// fasthttp parses it. A proxy in front that reads lines otherwise can thus
// never make serve see other requests than it did.
//
// To know where the headers of the next request begin, the watch follows
// each request's framing: after the empty line, a Content-Length body is
// passed unread. A request sent with Transfer-Encoding (chunked), or with a
// Content-Length it cannot read, ends the watch for the rest of its
// connection: its bytes are then served as fasthttp reads them, as before.
// Our own clients send neither.

// lineWatch is the watch of one connection's stream.
type lineWatch struct {
	state   watchState
	body    int64 // watchBody: body bytes still to pass
	started bool  // a line of this request that is not empty has ended
	length  int64 // this request's Content-Length; -1 none
	cr      bool  // the last byte read was CR
	partial int   // bytes of the current line read in earlier reads
	carry   [carryLen]byte
}

type watchState uint8

const (
	watchHead watchState = iota // a request line or headers
	watchBody                   // a body of known length
	watchOff                    // no more watching
)

// carryLen bounds what is kept of a line that spans reads: enough for
// "Content-Length: " and any length.
const carryLen = 48

func newLineWatch() lineWatch { return lineWatch{length: -1} }

// scan follows p, the next bytes of the stream, and reports whether a
// line of a request's head ended in a bare LF; if so, whole is how many
// bytes of p come before that head (the requests pipelined before it).
func (w *lineWatch) scan(p []byte) (whole int, bareLF bool) {
	head := 0 // where the current head began in p (0: before p)
	for off := 0; off < len(p); {
		switch w.state {
		case watchOff:
			return 0, false
		case watchBody:
			if int64(len(p)-off) <= w.body {
				w.body -= int64(len(p) - off)
				return 0, false
			}
			off += int(w.body)
			*w = newLineWatch()
			head = off
			continue
		}
		i := bytes.IndexByte(p[off:], '\n')
		if i < 0 {
			w.keep(p[off:])
			return 0, false
		}
		if i > 0 {
			w.cr = p[off+i-1] == '\r'
		}
		if !w.cr {
			return head, true
		}
		n := w.partial + i - 1 // the line's length, without its CRLF
		line := p[off : off+max(i-1, 0)]
		if w.partial > 0 {
			if i > 0 {
				w.keep(p[off : off+i])
			}
			line = w.carry[:min(n, carryLen)]
		}
		w.partial, w.cr = 0, false
		off += i + 1
		if w.line(line, n) {
			head = off
		}
	}
	return 0, false
}

// keep notes b, the start or more of a line that ends in a later read.
func (w *lineWatch) keep(b []byte) {
	if w.partial < carryLen {
		copy(w.carry[w.partial:], b)
	}
	w.partial += len(b)
	w.cr = b[len(b)-1] == '\r'
}

// line reads a line of a request's head: line is its first bytes (all of
// them unless n, its length, is more than carryLen). It reports whether
// the next request's head begins after it.
func (w *lineWatch) line(line []byte, n int) (next bool) {
	switch {
	case n == 0 && !w.started:
		// An empty line before the request line, which is allowed.
	case n == 0: // the end of the head
		if w.length > 0 {
			w.state, w.body = watchBody, w.length
		} else {
			*w = newLineWatch()
			return true
		}
	case !w.started: // the request line
		w.started = true
	case line[0]|0x20 == 'c' || line[0]|0x20 == 't':
		name, value, _ := bytes.Cut(line, []byte{':'})
		switch {
		case bytes.EqualFold(name, []byte("transfer-encoding")):
			w.state = watchOff
		case bytes.EqualFold(name, []byte("content-length")):
			// Digits only, as fasthttp reads it (ParseUint takes no sign).
			v, err := strconv.ParseUint(string(trimOWS(value)), 10, 62)
			if err != nil || len(line) < n || w.length >= 0 {
				w.state = watchOff // fasthttp refuses it, or reads it otherwise
			}
			w.length = int64(v)
		}
	}
	return false
}

// trimOWS trims the spaces and tabs around a header's value.
func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}
