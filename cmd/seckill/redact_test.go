package main

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// TestRedact: the password of every URL form is found, and hidden in
// errors (which keep their chain), log lines and printed URLs.
func TestRedact(t *testing.T) {
	const pw = "s3cr3t/p@ss"
	for _, raw := range []string{
		"redis://u:s3cr3t%2Fp%40ss@host:6379/0",
		"rediss://:s3cr3t%2Fp%40ss@host",
		"redis+sentinel://u:s3cr3t%2Fp%40ss@/",
		"redis+sentinel://u:s3cr3t%2Fp%40ss@h1:26379,h2:26379/mymaster",
		"redis+cluster://u:s3cr3t%2Fp%40ss@h1:7000?addr=h2:7000",
		"postgres://u:s3cr3t%2Fp%40ss@host/db",
		"postgres://host/db?sslmode=disable&password=s3cr3t%2Fp%40ss",
		"mysql://u:s3cr3t%2Fp%40ss@host:3306/db",
	} {
		hide := (secrets{}).add(urlSecrets(raw)...)
		for _, text := range []string{pw, raw, "dial " + raw + ": refused"} {
			if got := hide.scrub(text); strings.Contains(got, pw) || strings.Contains(got, "s3cr3t%2Fp%40ss") {
				t.Errorf("%s: scrub(%q) = %q", raw, text, got)
			}
		}
		if got := redactURL(raw); strings.Contains(got, "s3cr3t") {
			t.Errorf("redactURL(%q) = %q", raw, got)
		}
	}
	// An unparsable URL: its user info is hidden whole.
	bad := "redis://u:s3cr3t/p@ss@host"
	if got := (secrets{}).add(urlSecrets(bad)...).scrub("bad URL " + bad); strings.Contains(got, "s3cr3t") {
		t.Errorf("unparsable URL: %q", got)
	}
	if got := redactURL(bad); strings.Contains(got, "s3cr3t") {
		t.Errorf("redactURL(%q) = %q", bad, got)
	}

	hide := (secrets{}).add(pw)
	cause := usagef("--redis: connect to %s", pw)
	err := hide.err(cause)
	var se startError
	if strings.Contains(err.Error(), pw) || !errors.As(err, &se) || !errors.Is(err, cause) {
		t.Errorf("err: %q (start error kept: %v)", err, errors.As(err, &se))
	}
	var buf bytes.Buffer
	var l logFlags
	l.level, l.format = "info", "json"
	log, lerr := l.logger(&buf, pw)
	if lerr != nil {
		t.Fatal(lerr)
	}
	log.Info("msg with "+pw, "err", errors.New("e "+pw), "s", pw, slog.Group("g", "x", pw))
	if strings.Contains(buf.String(), pw) || !strings.Contains(buf.String(), "xxxxx") {
		t.Errorf("log line: %s", buf.String())
	}
}
