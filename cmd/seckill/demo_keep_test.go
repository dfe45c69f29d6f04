package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"
)

// --keep, --no-keep and the countdown they leave; a test's stdin is no
// terminal, so neither flag means an unattended run.
func TestKeepFlags(t *testing.T) {
	for _, c := range []struct {
		args      []string
		keep      bool
		countdown time.Duration
		err       string
	}{
		{nil, false, 3 * time.Second, ""},
		{[]string{"--no-keep"}, false, 3 * time.Second, ""},
		{[]string{"--keep"}, true, keepCountdown, ""},
		{[]string{"--keep", "--countdown", "2s"}, true, 2 * time.Second, ""},
		{[]string{"--keep", "--no-keep"}, false, 3 * time.Second, "contradict"},
	} {
		fs := newFlagSet("demo", io.Discard)
		countdown := fs.Duration("countdown", 3*time.Second, "")
		var k keepFlags
		k.register(fs)
		if err := fs.parse(c.args); err != nil {
			t.Fatal(err)
		}
		keep, err := k.resolve(fs, countdown)
		if keep != c.keep || *countdown != c.countdown || (err == nil) != (c.err == "") || err != nil && !strings.Contains(err.Error(), c.err) {
			t.Errorf("%v: keep %t, countdown %v, err %v; want %t, %v, %q", c.args, keep, *countdown, err, c.keep, c.countdown, c.err)
		}
	}
}

// The service is kept until a line is typed, the input ends, or Ctrl-C.
func TestKeepServing(t *testing.T) {
	var out strings.Builder
	keepServing(context.Background(), strings.NewReader("\n"), "http://x/dashboard/", &out)
	if !strings.Contains(out.String(), "http://x/dashboard/") || !strings.Contains(out.String(), "press Enter") {
		t.Errorf("said %q", out.String())
	}
	keepServing(context.Background(), strings.NewReader(""), "u", io.Discard) // input ended
	r, w := io.Pipe()
	defer w.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // Ctrl-C
	keepServing(ctx, r, "u", io.Discard)
}
