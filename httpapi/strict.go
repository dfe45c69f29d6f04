package httpapi

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"sync"

	"github.com/seckilldev/seckill"
)

// The strict edges: what a request must be beyond what its route reads,
// one rule for each place where a gateway, a cache or a log and this API
// could read the same bytes two ways. Each is refused rather than read one
// way:
//
//   - a body where the request takes none (415, whatever its type: only
//     creating an activity and paying take one);
//   - a Content-Type sent twice (400; fasthttp keeps the last);
//   - a query string that does not parse, or names a parameter twice (400;
//     the API would read the first);
//   - a path that is percent-encoded (404: paths match as sent, and no
//     route has a % in it);
//   - in a JSON body, a key an object holds twice, or a key of the request
//     not spelled exactly as declared (400; encoding/json keeps the last
//     and matches names in any case).

// takesBody lists the requests ("METHOD pattern") that take a body; any
// other must come without one: no Content-Length, or 0, or an empty
// chunked body. The API's own clients send none (loadgen's grabs carry
// Content-Length: 0).
var takesBody = map[string]bool{
	"POST /api/v1/activities":      true,
	"POST /api/v1/orders/{id}/pay": true,
}

var (
	errNoBody           = seckill.Errorf(codeMediaType, "this request takes no body: send it without one")
	errContentTypeTwice = seckill.Errorf(seckill.EINVALID, "the Content-Type header must be sent once")
	errQuery            = seckill.Errorf(seckill.EINVALID, "the query string is malformed")
)

// checkBody applies the rules of a request that has a body (r.ContentLength
// is not 0): its Content-Type sent once, and a body only where the request
// takes one.
func checkBody(r *http.Request) error {
	if len(r.Header["Content-Type"]) > 1 {
		return errContentTypeTwice
	}
	if takesBody[r.Method+" "+r.Pattern] {
		return nil
	}
	if r.ContentLength < 0 { // chunked: empty is no body
		var b [1]byte
		if n, _ := io.ReadFull(r.Body, b[:]); n == 0 {
			return nil
		}
	}
	return errNoBody
}

// checkQuery refuses a query string that does not parse (such as one
// with a ; or a bad % escape) or that names a parameter more than once.
func checkQuery(raw string) error {
	if raw == "" {
		return nil
	}
	q, err := url.ParseQuery(raw)
	if err != nil {
		return errQuery
	}
	for k, v := range q {
		if len(v) > 1 {
			return seckill.Errorf(seckill.EINVALID, "the query parameter %.40q is sent more than once", k)
		}
	}
	return nil
}

// encodedPath reports whether the path of u was sent with a % escape, or
// with a byte that needs one.
func encodedPath(u *url.URL) bool { return strings.IndexByte(u.EscapedPath(), '%') >= 0 }

// repeatedContentType reports whether raw headers (a fasthttp request's,
// as sent) hold more than one Content-Type.
func repeatedContentType(raw []byte) bool {
	const name = "content-type:"
	seen := false
	for len(raw) > 0 {
		var line []byte
		line, raw, _ = bytes.Cut(raw, []byte{'\n'})
		if len(line) >= len(name) && bytes.EqualFold(line[:len(name)], []byte(name)) {
			if seen {
				return true
			}
			seen = true
		}
	}
	return false
}

// checkKeys walks a JSON text for what encoding/json reads leniently: a
// key an object holds twice (it keeps the last), and a key of the top
// object that is not exactly a JSON name of v's struct type (it matches
// names in any case, NAME for name, and even ſ for s). What is not valid
// JSON is left to the decoder, which says so.
func checkKeys(body []byte, v any) error {
	names := jsonNames(reflect.TypeOf(v))
	type frame struct {
		keys    map[string]bool // nil: an array
		wantKey bool
	}
	var stack []frame
	dec := json.NewDecoder(bytes.NewReader(body))
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil // the end, or not JSON: the decoder's to tell
		}
		if top := len(stack) - 1; top >= 0 && stack[top].wantKey {
			if k, ok := tok.(string); ok {
				switch {
				case stack[top].keys[k]:
					return seckill.Errorf(seckill.EINVALID, "the key %.40q appears twice in one object", k)
				case top == 0 && names != nil && !names[k]:
					return unknownField(k, names)
				}
				stack[top].keys[k] = true
				stack[top].wantKey = false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, frame{keys: map[string]bool{}, wantKey: true})
			continue
		case json.Delim('['):
			stack = append(stack, frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		// A value ended: its object, if any, wants a key next.
		if top := len(stack) - 1; top >= 0 && stack[top].keys != nil {
			stack[top].wantKey = true
		}
	}
}

// unknownField is the error of a key that no field is named exactly.
func unknownField(k string, names map[string]bool) error {
	for n := range names {
		if strings.EqualFold(k, n) {
			return seckill.Errorf(seckill.EINVALID, "unknown field %.40q: names are case-sensitive (the field is %q)", k, n)
		}
	}
	return seckill.Errorf(seckill.EINVALID, "unknown field %.40q", k)
}

var jsonNamesCache sync.Map // reflect.Type -> map[string]bool

// jsonNames is the set of JSON names of the fields of the struct *T or T
// that t is (nil for any other type).
func jsonNames(t reflect.Type) map[string]bool {
	if v, ok := jsonNamesCache.Load(t); ok {
		return v.(map[string]bool)
	}
	s := t
	if s.Kind() == reflect.Pointer {
		s = s.Elem()
	}
	var names map[string]bool
	if s.Kind() == reflect.Struct {
		names = map[string]bool{}
		for f := range s.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			switch {
			case !f.IsExported() || name == "-":
			case name != "":
				names[name] = true
			default:
				names[f.Name] = true
			}
		}
	}
	jsonNamesCache.Store(t, names)
	return names
}

// checkRequest applies the rules of strict.go to a request of a route
// (its path is one: the mux matched it).
func checkRequest(r *http.Request) error {
	if r.ContentLength != 0 {
		if err := checkBody(r); err != nil {
			return err
		}
	}
	return checkQuery(r.URL.RawQuery)
}
