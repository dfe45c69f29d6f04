#!/usr/bin/env bash
# The cost of a waiting room's status poll, measured with wrk against a bare Go handler, alternating
# in one run. Run from the project root:
#   perf/wrk-queue.sh                       # 2 rounds of 8 s, 64 connections, 2,000 waiting buyers
#   ROUNDS=3 DUR=8s CONN=64 BUYERS=5000 perf/wrk-queue.sh
# It builds ./cmd/seckill and ./perf/baseline, starts its own redis-server and serve (SQLite), creates
# a sale behind a waiting room that admits 1 buyer a second (so that the buyers keep waiting),
# joins BUYERS buyers, then alternates the bare handler (GET /hello) and polls of the buyers' status
# (perf/queue.lua), ROUNDS times. Prints the medians, the ratio to the bare handler, the CPU serve
# and Redis spent per poll (from /proc), and the Redis commands Redis counted during the polls (the
# instance's refresh every 100 ms and the admitter's ticks, not the polls: a poll sends none).
# Needs: wrk (apt-get install wrk), redis-server, redis-cli, python3, curl.
set -u
T=$(mktemp -d); pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
here=$(cd "$(dirname "$0")" && pwd)
DUR=${DUR:-8s}; CONN=${CONN:-64}; ROUNDS=${ROUNDS:-2}; BUYERS=${BUYERS:-2000}
for c in wrk redis-server redis-cli python3 curl; do command -v $c >/dev/null || { echo "$c missing (wrk: apt-get install wrk)"; exit 1; }; done
go build -o $T/seckill ./cmd/seckill || exit 1
go build -o $T/baseline ./perf/baseline || exit 1
. "$here/lib.sh"
RP=$(port); SP=$(port); BP=$(port)
TOKEN=perf-admin-token-0123456789abcdef
redis-server --port $RP --bind 127.0.0.1 --save "" --appendonly no --dir $T --daemonize no >$T/redis.log 2>&1 & pids+=($!)
sleep 0.5
$T/seckill serve --listen 127.0.0.1:$SP --redis redis://127.0.0.1:$RP/0 --db "sqlite://$T/queue.db" \
  --admin-token $TOKEN >$T/serve.log 2>&1 & pids+=($!)
$T/baseline -listen 127.0.0.1:$BP >$T/base.log 2>&1 & pids+=($!)
for i in $(seq 100); do curl -fs http://127.0.0.1:$SP/healthz >/dev/null && curl -fs http://127.0.0.1:$BP/hello >/dev/null && break; sleep 0.2; done
A=$(curl -s -X POST http://127.0.0.1:$SP/api/v1/activities -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
  -d "{\"name\":\"perf\",\"stock\":1000,\"starts_at\":\"$(date -u -d '-5 sec' +%FT%TZ)\",\"ends_at\":\"$(date -u -d '+1 hour' +%FT%TZ)\",\"queue\":{\"rate\":1}}" |
  python3 -c 'import json,sys;print(json.load(sys.stdin)["id"])') || { echo "cannot create the sale"; tail -5 $T/serve.log; exit 1; }
python3 - "http://127.0.0.1:$SP/api/v1/activities/$A/queue" $BUYERS >$T/tickets <<'PY'
import http.client, json, sys, urllib.parse
u = urllib.parse.urlparse(sys.argv[1]); c = http.client.HTTPConnection(u.hostname, u.port)
for uid in range(1, int(sys.argv[2]) + 1):
    c.request("POST", u.path, headers={"X-User-ID": str(uid)}); r = c.getresponse(); b = json.loads(r.read())
    print(uid, b["ticket"])
PY
echo "$(date -u +%F), $(nproc) CPUs, wrk -t1 -c$CONN -d$DUR, $ROUNDS rounds, $(wc -l <$T/tickets) waiting buyers"
SPID=${pids[1]} RPID=${pids[0]} BPID=${pids[2]}
# the commands Redis processed (the runs' lines: ... redis-commands seconds; one of them is the
# probe's own first INFO, taken off below)
cmds() { redis-cli -p $RP info stats | tr -d '\r' | awk -F: '/^total_commands_processed:/{print $2}'; }
for r in $(seq $ROUNDS); do
  h=$(run baseline cmds http://127.0.0.1:$BP/hello)
  p=$(run poll cmds -s "$here/queue.lua" http://127.0.0.1:$SP -- /api/v1/activities/$A/queue $T/tickets)
  echo "round $r: baseline $h req/s, status polls $p"
done
awk '/^-- /{l=$2} /Socket errors|Non-2xx/{print "  " l ": " $0}' $T/wrk.log
python3 - $T/runs $(getconf CLK_TCK) <<'PY'
import sys, statistics as st
runs, hz = {}, float(sys.argv[2])
for line in open(sys.argv[1]):
    label, *v = line.split()
    runs.setdefault(label, []).append([float(x) for x in v])
def med(label, i): return st.median(r[i] for r in runs[label])
H, P = med("baseline", 1), med("poll", 1)
print(f"baseline {H:.0f} req/s | status polls {P:.0f} req/s ({P/H:.2f}x)")
def us(label, i): return st.median(r[i] / hz / r[0] * 1e6 for r in runs[label])
print(f"CPU per request: baseline {us('baseline', 4):.1f} µs | a poll: serve {us('poll', 2):.1f} µs, redis {us('poll', 3):.2f} µs")
n = sum(r[0] for r in runs["poll"]); c = sum(r[5] - 1 for r in runs["poll"]); secs = sum(r[6] for r in runs["poll"])
print(f"Redis commands during the polls: {c:.0f} in {secs:.0f} s ({c/secs:.1f}/s: the refresh and the admitter), {c/n:.5f} a poll")
PY
