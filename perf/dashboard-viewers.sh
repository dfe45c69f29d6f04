#!/usr/bin/env bash
# What open dashboard pages cost the grab path: wrk against `seckill serve` (with its worker, on
# PostgreSQL) with no dashboard page open, then with VIEWERS pages (event streams read by curl),
# alternating ROUNDS times, 8 s each, 64 connections; two scenarios, as perf/wrk-grab.sh:
# grabs that all succeed (stock 100,000,000: six runs never sell it out; a new user per request) and grabs after the sell-out.
# Prints serve's CPU with the pages open and no load, then the medians of the throughputs and the
# ratio with pages to without. Run from the project root:
#   perf/dashboard-viewers.sh              # VIEWERS=100 ROUNDS=3 DUR=8s CONN=64
#   SECKILL_BIN=/path/to/seckill perf/dashboard-viewers.sh   # a binary built before, instead of ./cmd/seckill
# Needs: wrk, curl, bc, python3, redis-server, PostgreSQL on 127.0.0.1:5432 (user postgres, trust).
# The wrk script is perf/grab.lua (GRAB_LUA to use another).
set -u
T=$(mktemp -d); pids=(); viewers=()
stop_viewers() { # (a bare wait would wait for the servers too)
  [ ${#viewers[@]} -gt 0 ] || return 0
  for p in "${viewers[@]}"; do kill "$p" 2>/dev/null; done; wait "${viewers[@]}" 2>/dev/null; viewers=(); }
cleanup() { stop_viewers; for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; sleep 0.5; for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  psql -qAt -h 127.0.0.1 -U postgres -d postgres -c "DROP DATABASE IF EXISTS dash_viewers WITH (FORCE)" >/dev/null 2>&1; rm -rf "$T"; }
trap cleanup EXIT
GRAB_LUA=${GRAB_LUA:-$(cd "$(dirname "$0")" && pwd)/grab.lua}
VIEWERS=${VIEWERS:-100}; ROUNDS=${ROUNDS:-3}; DUR=${DUR:-8s}; CONN=${CONN:-64}
for c in wrk curl redis-server psql; do command -v $c >/dev/null || { echo "$c missing"; exit 1; }; done
[ -f "$GRAB_LUA" ] || { echo "no wrk script at $GRAB_LUA (set GRAB_LUA)"; exit 1; }
if [ -n "${SECKILL_BIN:-}" ]; then cp "$SECKILL_BIN" $T/seckill; else go build -o $T/seckill ./cmd/seckill || exit 1; fi
port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
RP=$(port); SP=$(port)
redis-server --port $RP --bind 127.0.0.1 --save "" --appendonly no --dir $T --daemonize no >$T/redis.log 2>&1 & pids+=($!)
psql -qAt -h 127.0.0.1 -U postgres -d postgres -c "DROP DATABASE IF EXISTS dash_viewers WITH (FORCE)" -c "CREATE DATABASE dash_viewers" >/dev/null || exit 1
sleep 0.5
$T/seckill serve --listen 127.0.0.1:$SP --redis redis://127.0.0.1:$RP/0 --db "postgres://postgres@127.0.0.1:5432/dash_viewers?sslmode=disable" \
  --admin-token perf-admin-token-0123456789abcdef >$T/serve.log 2>&1 & pids+=($!)
for i in $(seq 100); do curl -fs http://127.0.0.1:$SP/healthz >/dev/null && break; sleep 0.2; done
mk() { curl -s -X POST http://127.0.0.1:$SP/api/v1/activities -H 'Authorization: Bearer perf-admin-token-0123456789abcdef' -H 'Content-Type: application/json' \
  -d "{\"name\":\"perf\",\"stock\":$1,\"starts_at\":\"$(date -u -d '-5 sec' +%FT%TZ)\",\"ends_at\":\"$(date -u -d '+1 hour' +%FT%TZ)\"}" | python3 -c 'import json,sys;print(json.load(sys.stdin)["id"])'; }
A=$(mk 100000000) && B=$(mk 1) || { echo "cannot create activities"; tail -5 $T/serve.log; exit 1; }
curl -s -X POST http://127.0.0.1:$SP/api/v1/activities/$B/grab -H 'X-User-ID: 1' >/dev/null
open_viewers() {
  for i in $(seq $VIEWERS); do curl -sN http://127.0.0.1:$SP/dashboard/events >$T/viewer.$i 2>/dev/null & viewers+=($!); done
  sleep 2 # every page has its stream and its history
  n=$(curl -sN --max-time 1 http://127.0.0.1:$SP/dashboard/events 2>/dev/null | grep -o '"viewers":[0-9]*' | tail -1)
  echo "  $n (this probe included)" >&2
}
# First the CPU the pages cost serve with no grab load, 20 s each: a figure that the noise of a
# shared machine moves far less than a throughput.
SPID=${pids[1]} # serve
cpu() { cut -d' ' -f14,15 /proc/$SPID/stat | tr ' ' '+' | bc; }
c0=$(cpu); sleep 20; c1=$(cpu); open_viewers; c2=$(cpu); sleep 20; c3=$(cpu); stop_viewers
echo "serve's CPU, no grab load: no page $((c1-c0))/100 s, $VIEWERS pages $((c3-c2))/100 s, in 20 s" >&2
run() { wrk -t1 -c$CONN -d$DUR --latency "$@" 2>&1 | tee -a $T/wrk.log | awk '/Requests\/sec/{print $2}'; }
s0=(); s1=(); o0=(); o1=(); u=0
for r in $(seq $ROUNDS); do
  order="0 1"; [ $((r % 2)) = 0 ] && order="1 0" # ABBA: neither goes first every time
  for with in $order; do
    [ $with = 1 ] && open_viewers
    u=$((u+1))
    s=$(run -s "$GRAB_LUA" http://127.0.0.1:$SP -- /api/v1/activities/$A/grab $((u*10000000)))
    o=$(run -s "$GRAB_LUA" http://127.0.0.1:$SP -- /api/v1/activities/$B/grab $((u*10000000+5000000)))
    if [ $with = 1 ]; then
      frames=$(cat $T/viewer.* | grep -c '^event: tick')
      s1+=($s); o1+=($o); stop_viewers
      echo "round $r, $VIEWERS pages: succeed $s req/s, sold out $o req/s ($frames frames delivered)" >&2
    else
      s0+=($s); o0+=($o)
      echo "round $r, no page:    succeed $s req/s, sold out $o req/s" >&2
    fi
  done
done
grep -E 'Non-2xx|Socket errors' $T/wrk.log | sort | uniq -c
python3 - "${s0[*]}" "${s1[*]}" "${o0[*]}" "${o1[*]}" "$VIEWERS" <<'PY'
import sys,statistics as st
s0,s1,o0,o1=[list(map(float,a.split())) for a in sys.argv[1:5]]
v=sys.argv[5]
for name,a,b in (("every grab succeeds",s0,s1),("after the sell-out",o0,o1)):
  A,B=st.median(a),st.median(b)
  print(f"{name}: no page {A:.0f} req/s, {v} pages {B:.0f} req/s: {B/A:.3f}x (runs: {' '.join(f'{x/y:.2f}' for x,y in zip(b,a))})")
PY
