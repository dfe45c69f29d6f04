package loadgen

import "bytes"

// classify maps a reply of the grab endpoint to its outcome and, for 200
// and 202, the order id it names. Replies are scanned in place rather than
// decoded: the shapes are fixed by the API and decoding would allocate on
// every request.
func classify(status int, body []byte) (outcome, int64) {
	switch status {
	case 200, 202:
		order, ok := orderID(body)
		if !ok {
			return outOther, 0
		}
		if status == 202 {
			return outAccepted, order
		}
		return outAlready, order
	}
	code := stringField(body, keyCode)
	switch {
	case status == 409 && bytes.Equal(code, codeSoldOut):
		return outSoldOut, 0
	case status == 403 && bytes.Equal(code, codeNotStarted):
		return outNotStarted, 0
	case status == 403 && bytes.Equal(code, codeEnded):
		return outEnded, 0
	case status == 404:
		return outNotFound, 0
	case status == 400:
		return outInvalid, 0
	case status == 503 && bytes.Equal(code, codeUnavailable):
		return outUnavailable, 0
	case status == 504 && bytes.Equal(code, codeUnknown):
		return outUnknown, 0
	}
	return outOther, 0
}

var (
	keyOrderID     = []byte(`"order_id"`)
	keyCode        = []byte(`"code"`)
	codeSoldOut    = []byte("sold_out")
	codeNotStarted = []byte("not_started")
	codeEnded      = []byte("ended")
	// A 503 without the code (a proxy's, say) promises nothing.
	codeUnavailable = []byte("unavailable")
	codeUnknown     = []byte("outcome_unknown")
)

// orderID returns the positive int64 in the body's "order_id" string.
func orderID(body []byte) (int64, bool) {
	s := stringField(body, keyOrderID)
	if len(s) == 0 || len(s) > 19 {
		return 0, false
	}
	var n int64
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := int64(c - '0')
		if n > (1<<63-1-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, n > 0
}

// stringField returns the raw (unescaped) value of the first string member
// named key (given with its quotes), or nil. Good enough for the flat
// objects of this API, whose values never contain escapes or quotes.
func stringField(body, key []byte) []byte {
	i := bytes.Index(body, key)
	if i < 0 {
		return nil
	}
	rest := skipSpace(body[i+len(key):])
	if len(rest) == 0 || rest[0] != ':' {
		return nil
	}
	rest = skipSpace(rest[1:])
	if len(rest) == 0 || rest[0] != '"' {
		return nil
	}
	rest = rest[1:]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return nil
	}
	return rest[:j]
}

func skipSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\n' || b[0] == '\r') {
		b = b[1:]
	}
	return b
}
