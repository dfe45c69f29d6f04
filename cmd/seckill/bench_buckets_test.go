package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"

	"github.com/seckilldev/seckill/check"
	"github.com/seckilldev/seckill/internal/testenv"
	"github.com/seckilldev/seckill/loadgen"
	"github.com/seckilldev/seckill/stock"
)

// TestBenchBucketsCluster runs `seckill bench --buckets 16` through HTTP
// (serve, its worker, PostgreSQL) on a 3-master Cluster: a crowd ten
// times the stock spreads its grab scripts over every master (each runs at
// least 25% of them), sells exactly the stock, and the checks hold (none
// oversold, doubled or lost); at most 0.1% of the sold-out answers came
// before a grab that was still sold a unit. Then a crowd 90% of whose
// users are homed in two of the buckets, which borrow from the others.
func TestBenchBucketsCluster(t *testing.T) {
	nodes := testenv.StartCluster(t, 3)
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	for _, skew := range []string{"0", "0.9"} {
		t.Run("skew="+skew, func(t *testing.T) {
			const stockN = 2000
			cmd := exec.Command(bin, "bench", "--redis", "redis+cluster://"+nodes[0].Addr, "--db", testenv.PostgresURL(t),
				"--buckets", "16", "--crowd-skew", skew, "--users", "20000", "--stock", "2000", "--repeat", "0.1", "--requests", "22000",
				"--concurrency", "64", "--json")
			cmd.Dir = t.TempDir()
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("bench: %v\n%s\n%s", err, stderr.String(), stdout.String())
			}
			var res struct {
				Load        *loadgen.Report   `json:"load"`
				Checks      *check.Report     `json:"checks"`
				ScriptCalls []stock.NodeCalls `json:"script_calls_per_master"`
				OK          bool              `json:"ok"`
			}
			if err := json.Unmarshal(stdout.Bytes(), &res); err != nil || res.Load == nil || res.Checks == nil {
				t.Fatalf("not the JSON report: %v\n%s", err, stdout.String())
			}
			n := res.Load.Counts
			t.Logf("skew %s: %d accepted, %d sold out, %d of them too early; script calls per master %v",
				skew, n.Accepted, n.SoldOut, res.Load.SoldOutEarly, res.ScriptCalls)
			if !res.OK || !res.Checks.OK() || res.Checks.Confirmed != stockN {
				t.Errorf("checks: ok %v, %d confirmed, want every check held and %d sold:\n%s", res.OK, res.Checks.Confirmed, stockN, stdout.String())
			}
			if n.Accepted != stockN || n.SoldOut == 0 {
				t.Errorf("%d accepted, %d sold out: want the stock, %d, then sold out", n.Accepted, n.SoldOut, stockN)
			}
			if res.Load.SoldOutEarly*1000 > n.SoldOut {
				t.Errorf("%d of %d sold-out answers came before a grab that was still sold a unit, want at most 0.1%%",
					res.Load.SoldOutEarly, n.SoldOut)
			}
			if len(res.ScriptCalls) != 3 {
				t.Fatalf("script calls of %d masters, want 3: %v", len(res.ScriptCalls), res.ScriptCalls)
			}
			if skew != "0" {
				return // the crowd's grabs are on two buckets' masters
			}
			var total int64
			for _, c := range res.ScriptCalls {
				total += c.Calls
			}
			for _, c := range res.ScriptCalls {
				if c.Calls*4 < total {
					t.Errorf("master %s ran %d of %d script calls, want at least 25%%", c.Addr, c.Calls, total)
				}
			}
		})
	}
}

// TestBenchCrowdSkewBadInput: --crowd-skew refuses what it cannot shape,
// naming the flag, before anything starts.
func TestBenchCrowdSkewBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--crowd-skew", "1"}, "--crowd-skew: 1 is not in [0, 1)"},
		{[]string{"--crowd-skew", "-0.5"}, "--crowd-skew: -0.5 is not in [0, 1)"},
		{[]string{"--crowd-skew", "0.9"}, "--crowd-skew homes the crowd in two of the buckets"},
		{[]string{"--crowd-skew", "0.9", "--buckets", "16", "--target", "http://127.0.0.1:1", "--activity", "3"}, "it needs --buckets 3 or more, and no --activity"},
		{[]string{"--crowd-skew", "0.9", "--buckets", "16", "--compare"}, "--crowd-skew shapes the crowd of one sale: not with --baseline or --compare"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stderr strings.Builder
			if code := run(context.Background(), append([]string{"bench"}, tc.args...), io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("bench %v: exit %d, %q; want 2 and %q", tc.args, code, stderr.String(), tc.want)
			}
		})
	}
}
