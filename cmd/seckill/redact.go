package main

import (
	"fmt"
	"log/slog"
	"net/url"
	"strings"
)

// Secrets never leave the process in clear: not in a log line, an error, a
// startup line or an admin page. The passwords of the Redis and database
// URLs (in the user info or a query parameter, in every URL form: redis://,
// redis+sentinel://u:pw@/..., postgres://...?password=...), the JWT secret
// and the admin token are collected once from the flags, and every text
// that may hold one goes through scrub.

// secretParams are the query parameters that hold credentials.
var secretParams = []string{"password", "pass", "passwd", "pwd", "sslpassword", "secret", "token", "auth"}

// urlSecrets returns the credentials in a URL. An unparsable URL's user
// info is taken whole: it cannot be told apart from the rest otherwise.
func urlSecrets(raw string) []string {
	var out []string
	u, err := url.Parse(raw)
	if err != nil {
		_, rest, ok := strings.Cut(raw, "://")
		if at := strings.LastIndexByte(rest, '@'); ok && at > 0 {
			userinfo := rest[:at]
			if _, pw, ok := strings.Cut(userinfo, ":"); ok {
				userinfo = pw
			}
			out = append(out, userinfo)
		}
		return out
	}
	if pw, ok := u.User.Password(); ok {
		out = append(out, pw, url.QueryEscape(pw), url.PathEscape(pw))
	}
	for k, vs := range u.Query() {
		for _, p := range secretParams {
			if strings.EqualFold(k, p) {
				for _, v := range vs {
					out = append(out, v, url.QueryEscape(v))
				}
			}
		}
	}
	return out
}

// secrets is a set of texts to hide.
type secrets []string

func (s secrets) add(texts ...string) secrets {
	for _, t := range texts {
		if len(t) >= 3 { // "a" would hide every "a"; such a password is no secret
			s = append(s, t)
		}
	}
	return s
}

// scrub replaces every secret in text.
func (s secrets) scrub(text string) string {
	for _, x := range s {
		if strings.Contains(text, x) {
			text = strings.ReplaceAll(text, x, "xxxxx")
		}
	}
	return text
}

// err returns err with its text scrubbed, keeping its chain for errors.Is
// and errors.As (a startError stays one).
func (s secrets) err(err error) error {
	if err == nil {
		return nil
	}
	text := err.Error()
	if clean := s.scrub(text); clean != text {
		return scrubbed{msg: clean, err: err}
	}
	return err
}

type scrubbed struct {
	msg string
	err error
}

func (e scrubbed) Error() string { return e.msg }
func (e scrubbed) Unwrap() error { return e.err }

// replaceAttr is a slog ReplaceAttr that scrubs every value, errors and
// the message included.
func (s secrets) replaceAttr(_ []string, a slog.Attr) slog.Attr {
	switch a.Value.Kind() {
	case slog.KindString:
		if v := a.Value.String(); s.scrub(v) != v {
			a.Value = slog.StringValue(s.scrub(v))
		}
	case slog.KindAny:
		var v string
		if err, ok := a.Value.Any().(error); ok {
			v = err.Error()
		} else {
			v = fmt.Sprint(a.Value.Any())
		}
		if clean := s.scrub(v); clean != v {
			a.Value = slog.StringValue(clean)
		}
	}
	return a
}

// redactURL hides the credentials of a URL for printing.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	q := u.Query()
	changed := false
	for k := range q {
		for _, p := range secretParams {
			if strings.EqualFold(k, p) {
				q.Set(k, "xxxxx")
				changed = true
			}
		}
	}
	if changed {
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}
