package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seckilldev/seckill/internal/testenv"
)

// TestBenchDrain runs `seckill bench --drain` on a small backlog, with the
// worker as a child process (PostgreSQL, SQLite) and in this process with a
// CPU profile (SQLite): every order must be in the database, drained, with
// every invariant held.
func TestBenchDrain(t *testing.T) {
	redisURL := "redis://" + testenv.RedisAddr(t)
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	const orders = 3000
	check := func(t *testing.T, out []byte) {
		t.Helper()
		var res drainResult
		if err := json.Unmarshal(out, &res); err != nil {
			t.Fatalf("output is not the JSON result: %v\n%s", err, out)
		}
		if !res.OK || res.Checks == nil || !res.Checks.OK() {
			t.Errorf("not ok: %s", out)
		}
		if res.Orders != orders || res.Checks.Sold() != orders || res.Checks.DBRemaining != 0 {
			t.Errorf("%d orders asked, %d sold, %d remaining in the database; want %d, %d, 0",
				res.Orders, res.Checks.Sold(), res.Checks.DBRemaining, orders, orders)
		}
		if res.Rate <= 0 || res.WorkerCPU <= 0 {
			t.Errorf("rate %v orders/s, worker CPU %vs: want both measured", res.Rate, res.WorkerCPU)
		}
	}

	for _, tc := range []struct{ name, db string }{
		{"postgres", testenv.PostgresURL(t)},
		{"sqlite", "sqlite://" + filepath.Join(t.TempDir(), "drain.db")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(bin, "bench", "--drain", "--orders", "3000", "--worker-batch", "100",
				"--redis", redisURL, "--db", tc.db, "--json")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("bench --drain: %v\n%s", err, stderr.String())
			}
			check(t, out)
		})
	}

	t.Run("inline", func(t *testing.T) {
		prof := filepath.Join(t.TempDir(), "cpu.prof")
		var stdout, stderr bytes.Buffer
		args := []string{"bench", "--drain", "--orders", "3000", "--redis", redisURL,
			"--db", "sqlite://" + filepath.Join(t.TempDir(), "drain.db"), "--cpuprofile", prof, "--json"}
		if code := run(context.Background(), args, &stdout, &stderr); code != 0 {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
		check(t, stdout.Bytes())
		if !strings.Contains(stderr.String(), "in-process worker") {
			t.Errorf("--cpuprofile did not run the worker in this process: %s", stderr.String())
		}
		if fi, err := os.Stat(prof); err != nil || fi.Size() == 0 {
			t.Errorf("no CPU profile written: %v", err)
		}
	})
}
