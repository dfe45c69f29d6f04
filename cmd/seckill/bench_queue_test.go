package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/loadgen"
)

// TestBenchQueue runs `seckill bench --queue-rate` on a crowd 10 times the
// admission rate, half of it joining before the start: every user joins
// and polls, only admitted users grab, the room admits in its order and
// tells everyone the truth at the end, and every invariant holds.
func TestBenchQueue(t *testing.T) {
	const users, stock, rate = 4000, 600, 400
	rep, room, stderr := runCrowd(t, "bench", "--queue-rate", "400", "--queue-hold", "2", "--join-rate", "4000", "--queue-early", "500ms",
		"--users", "4000", "--stock", "600", "--concurrency", "32", "--duration", "2m",
		"--redis", "redis://"+testenv.RedisAddr(t), "--db", "sqlite://"+filepath.Join(t.TempDir(), "queue.db"))
	q := rep.Queue
	if rep.Counts.Accepted != stock {
		t.Errorf("%d accepted, want the stock, %d", rep.Counts.Accepted, stock)
	}
	// About half the crowd joined in the 500 ms before the start.
	if q.Joined != users || q.Drawn < users/4 || q.Drawn > users*3/4 {
		t.Errorf("%d joined, %d of them before the start; want %d and about half", q.Joined, q.Drawn, users)
	}
	// Everyone was told how it ended: a pass, or sold out.
	if q.Waiting != 0 || q.Admitted+q.SoldOut != users {
		t.Errorf("%d admitted, %d sold out, %d still waiting; want %d told, none waiting", q.Admitted, q.SoldOut, q.Waiting, users)
	}
	// With hold 2, the room admits at most about the stock and twice what
	// is left on top: not the crowd.
	if q.Admitted < stock || q.Admitted > 3*stock {
		t.Errorf("%d admitted for a stock of %d with hold 2", q.Admitted, stock)
	}
	if q.OutOfOrder != 0 {
		t.Errorf("%d users told waiting after someone behind them was admitted", q.OutOfOrder)
	}
	// The order of the arrivals (the generator's own jitter on a loaded
	// machine lowers tau: benchmarks.md has the quiet figure).
	if q.KendallTau < 0.9 {
		t.Errorf("Kendall tau %.4f between the joins sent and the room's order", q.KendallTau)
	}
	// Only the admitted grab, and the room admits 400 a second.
	if q.GrabsPeak > 2*rate {
		t.Errorf("peak %d grabs in a second at an admission rate of %d", q.GrabsPeak, rate)
	}
	// The service's own count: admitted at the room's rate (a tick late
	// or early at most on a loaded machine), and grabs past the pass check
	// no more than admitted.
	if room == nil || len(room.Admitted) == 0 {
		t.Fatalf("no series of the service's waiting room")
	}
	var admitted, grabs int64
	for i := range room.Admitted {
		admitted, grabs = admitted+room.Admitted[i], grabs+room.Grabs[i]
		if room.Admitted[i] > 2*rate {
			t.Errorf("the service admitted %d in second %d at a rate of %d: %v", room.Admitted[i], i, rate, room.Admitted)
		}
	}
	if admitted > q.Admitted || grabs > rep.Requests {
		t.Errorf("the service counted %d admitted and %d grabs; the crowd was told %d admitted and sent %d grabs",
			admitted, grabs, q.Admitted, rep.Requests)
	}
	if !strings.Contains(stderr, "created activity") {
		t.Errorf("no sale created: %s", stderr)
	}
}

func TestBenchQueueFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--queue-rate", "-1"}, "--queue-rate: -1 is not between 0 and 1000000"},
		{[]string{"--queue-rate", "10", "--queue-hold", "101"}, "--queue-hold: 101 is not between 0 and 100"},
		{[]string{"--queue-hold", "2"}, "--queue-hold, --join-rate and --queue-early go with --queue-rate"},
		{[]string{"--queue-rate", "10", "--join-rate", "-5"}, "--join-rate: -5 is not between 0 and 10000000"},
		{[]string{"--queue-rate", "10", "--queue-early", "2h"}, "--queue-early: 2h0m0s is not between 0 and 1h"},
		{[]string{"--queue-rate", "10", "--baseline"}, "not with --baseline, --compare or --drain"},
		{[]string{"--queue-rate", "10", "--repeat", "0.1"}, "--requests and --repeat do not apply with --queue-rate"},
		{[]string{"--queue-rate", "10", "--target", "http://127.0.0.1:1", "--activity", "3"}, "not with --activity"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			var stderr strings.Builder
			code := run(ctx, append([]string{"bench"}, tc.args...), io.Discard, &stderr)
			if code != 2 || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("bench %v: exit %d, %q; want 2 and %q", tc.args, code, stderr.String(), tc.want)
			}
		})
	}
}

// TestDemoQueue runs `seckill demo --queue-rate` on its embedded defaults,
// the buyers named by bearer JWTs: half the crowd joins in the countdown,
// half after the start, every user is told how it ended, and the checks
// hold.
func TestDemoQueue(t *testing.T) {
	rep, _, stderr := runCrowd(t, "demo", "--queue-rate", "100", "--users", "1500", "--stock", "80", "--countdown", "2s",
		"--identity", "jwt")
	q := rep.Queue
	if rep.Counts.Accepted != 80 {
		t.Errorf("%d accepted, want the stock, 80", rep.Counts.Accepted)
	}
	if q.Joined != 1500 || q.Drawn == 0 || q.Drawn == 1500 || q.Waiting != 0 || q.Admitted+q.SoldOut != 1500 {
		t.Errorf("joined %d (%d before the start), %d admitted, %d sold out, %d waiting; want 1500 with some before and some after, all told",
			q.Joined, q.Drawn, q.Admitted, q.SoldOut, q.Waiting)
	}
	if !strings.Contains(stderr, "/queue/?activity=") {
		t.Errorf("the buyer's page is not printed: %s", stderr)
	}
}

// runCrowd runs seckill demo or bench with args and --json, and returns
// the crowd's report, which must have the waiting room's part, the
// service's series of the room (bench), and the command's stderr; the run
// must pass its checks.
func runCrowd(t *testing.T, args ...string) (*loadgen.Report, *roomSeries, string) {
	t.Helper()
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append(args, "--json")...)
	cmd.Dir = t.TempDir()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n%s\n%s", args[0], err, stderr.String(), stdout.String())
	}
	var res struct {
		Load *loadgen.Report `json:"load"`
		Room *roomSeries     `json:"room"`
		OK   bool            `json:"ok"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatalf("not the JSON report: %v\n%s", err, stdout.String())
	}
	if !res.OK || res.Load == nil || res.Load.Queue == nil {
		t.Fatalf("not ok, or no report of the waiting room: %s", stdout.String())
	}
	return res.Load, res.Room, stderr.String()
}
