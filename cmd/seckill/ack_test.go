package main

import (
	"context"
	"io"
	"strings"
	"testing"
)

func TestAckFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  string
		want string
	}{
		{[]string{"--ack-replicas", "-1"}, "", "--ack-replicas: -1 is negative"},
		{[]string{"--ack-replicas", "1", "--ack-timeout", "0s"}, "", "--ack-timeout: 0s is not between 1ms and 900ms"},
		{[]string{"--ack-replicas", "1"}, "2s", "--ack-timeout: 2s is not between 1ms and 900ms"},
	} {
		if tc.env != "" {
			t.Setenv("SECKILL_ACK_TIMEOUT", tc.env)
		}
		serveRefuses(t, tc.args, tc.env, tc.want)
	}
}

// serveRefuses checks that serve with args (and env, the value of the
// variable the test set, for the message) exits 2 with want on stderr.
func serveRefuses(t *testing.T, args []string, env, want string) {
	t.Helper()
	// Were the value let through, serve would stop at once.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var stderr strings.Builder
	code := run(ctx, append([]string{"serve", "--listen", "127.0.0.1:0", "--db", "sqlite://:memory:"}, args...), io.Discard, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), want) {
		t.Errorf("serve %v (env %q): exit %d, %q; want 2 and %q", args, env, code, stderr.String(), want)
	}
}
