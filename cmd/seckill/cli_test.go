package main

import (
	"context"
	"strings"
	"testing"
)

// runCLI runs a command line in this process, as main does, and returns
// its exit code, stdout and stderr.
func runCLI(t *testing.T, ctx context.Context, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut strings.Builder
	code = run(ctx, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestTokenSecretMessage: a missing or short secret is refused with a
// message that names both the flag and its environment twin.
func TestTokenSecretMessage(t *testing.T) {
	long := strings.Repeat("k", 32)
	for _, tc := range []struct {
		name  string
		args  []string
		env   string // SECKILL_JWT_SECRET, if set
		code  int
		wants []string
	}{
		{"missing", nil, "", 2, []string{"no secret", "--jwt-secret", "SECKILL_JWT_SECRET", "at least 32 bytes"}},
		{"short flag", []string{"--jwt-secret", "short"}, "", 2, []string{"--jwt-secret", "SECKILL_JWT_SECRET", "5 bytes", "at least 32"}},
		{"short env", nil, "tooshort", 2, []string{"--jwt-secret", "SECKILL_JWT_SECRET", "8 bytes", "at least 32"}},
		{"env", []string{"--count", "2"}, long, 0, nil},
		{"flag", []string{"--jwt-secret", long}, "", 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv("SECKILL_JWT_SECRET", tc.env)
			}
			code, stdout, stderr := runCLI(t, context.Background(), append([]string{"token"}, tc.args...)...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr %q", code, tc.code, stderr)
			}
			for _, w := range tc.wants {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q does not say %q", stderr, w)
				}
			}
			if tc.code == 0 && (stderr != "" || strings.Count(stdout, ".") < 2) {
				t.Errorf("no token: stdout %q, stderr %q", stdout, stderr)
			}
		})
	}
	// serve names the twin too.
	code, _, stderr := runCLI(t, context.Background(), "serve", "--identity", "jwt", "--jwt-secret", "short")
	if code != 2 || !strings.Contains(stderr, "SECKILL_JWT_SECRET") || !strings.Contains(stderr, "5 bytes") {
		t.Errorf("serve: exit %d, %q", code, stderr)
	}
	code, _, stderr = runCLI(t, context.Background(), "serve", "--identity", "jwt")
	if code != 2 || !strings.Contains(stderr, "SECKILL_JWT_SECRET") {
		t.Errorf("serve: exit %d, %q", code, stderr)
	}
}
