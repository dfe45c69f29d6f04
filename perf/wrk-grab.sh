#!/usr/bin/env bash
# The grab path's throughput as a ratio to a bare Go handler, measured with wrk (a C load generator
# far cheaper per request than any Go client, so it does not compress the ratios). Run from the
# project root:
#   perf/wrk-grab.sh                  # serve with its worker (PostgreSQL on the same machine)
#   NO_WORKER=1 perf/wrk-grab.sh      # the API tier alone (serve --no-worker)
#   SECKILL_BIN=./seckill perf/wrk-grab.sh   # a binary built before, instead of ./cmd/seckill
# It builds ./cmd/seckill and ./perf/baseline, starts its own redis-server and a fresh PostgreSQL
# database, then alternates, ROUNDS times (2), DUR each (8s) with CONN connections (64) and one wrk
# thread: the bare handler (perf/baseline, GET /hello), grabs that all succeed (stock 1,000,000, a
# new user per request: perf/grab.lua), and grabs after the sell-out (stock 1, sold before the
# first run). Prints every run, the medians and the ratios to the bare handler.
# Needs: wrk (apt-get install wrk), redis-server, python3, curl, PostgreSQL on 127.0.0.1:5432
# (user postgres, trust; PGURL to use another server).
set -u
export PGOPTIONS=--client-min-messages=warning # no NOTICE for a database that was not there
T=$(mktemp -d); pids=()
PGURL=${PGURL:-postgres://postgres@127.0.0.1:5432}
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; sleep 0.5; for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  psql -qAt "$PGURL/postgres" -c "DROP DATABASE IF EXISTS wrk_grab WITH (FORCE)" >/dev/null 2>&1; rm -rf "$T"; }
trap cleanup EXIT
here=$(cd "$(dirname "$0")" && pwd)
DUR=${DUR:-8s}; CONN=${CONN:-64}; ROUNDS=${ROUNDS:-2}
for c in wrk redis-server psql python3 curl; do command -v $c >/dev/null || { echo "$c missing (wrk: apt-get install wrk)"; exit 1; }; done
if [ -n "${SECKILL_BIN:-}" ]; then cp "$SECKILL_BIN" $T/seckill; else go build -o $T/seckill ./cmd/seckill || exit 1; fi
go build -o $T/baseline ./perf/baseline || exit 1
port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
RP=$(port); SP=$(port); BP=$(port)
redis-server --port $RP --bind 127.0.0.1 --save "" --appendonly no --dir $T --daemonize no >$T/redis.log 2>&1 & pids+=($!)
psql -qAt "$PGURL/postgres" -c "DROP DATABASE IF EXISTS wrk_grab WITH (FORCE)" -c "CREATE DATABASE wrk_grab" >/dev/null || exit 1
sleep 0.5
$T/seckill serve --listen 127.0.0.1:$SP --redis redis://127.0.0.1:$RP/0 --db "$PGURL/wrk_grab?sslmode=disable" \
  --admin-token perf ${NO_WORKER:+--no-worker} >$T/serve.log 2>&1 & pids+=($!)
$T/baseline -listen 127.0.0.1:$BP >$T/base.log 2>&1 & pids+=($!)
for i in $(seq 100); do curl -fs http://127.0.0.1:$SP/healthz >/dev/null && curl -fs http://127.0.0.1:$BP/hello >/dev/null && break; sleep 0.2; done
mk() { curl -s -X POST http://127.0.0.1:$SP/api/v1/activities -H 'Authorization: Bearer perf' -H 'Content-Type: application/json' \
  -d "{\"name\":\"perf\",\"stock\":$1,\"starts_at\":\"$(date -u -d '-5 sec' +%FT%TZ)\",\"ends_at\":\"$(date -u -d '+1 hour' +%FT%TZ)\"}" | python3 -c 'import json,sys;print(json.load(sys.stdin)["id"])'; }
A=$(mk 1000000) && B=$(mk 1) || { echo "cannot create activities"; tail -5 $T/serve.log; exit 1; }
curl -s -X POST http://127.0.0.1:$SP/api/v1/activities/$B/grab -H 'X-User-ID: 1' >/dev/null
echo "$(date -u +%F) $(nproc) CPUs, wrk -t1 -c$CONN -d$DUR, $ROUNDS rounds, serve ${NO_WORKER:+--no-worker (the API alone)}${NO_WORKER:-with its worker on PostgreSQL}"
run() { # label, wrk arguments...
  local label=$1; shift
  echo "-- $label" >>$T/wrk.log
  wrk -t1 -c$CONN -d$DUR --latency "$@" 2>&1 | tee -a $T/wrk.log | awk '/Requests\/sec/{print $2}'; }
h=(); s=(); o=()
for r in $(seq $ROUNDS); do
  h+=($(run baseline http://127.0.0.1:$BP/hello))
  s+=($(run succeed -s "$here/grab.lua" http://127.0.0.1:$SP -- /api/v1/activities/$A/grab $((r*10000000))))
  o+=($(run soldout -s "$here/grab.lua" http://127.0.0.1:$SP -- /api/v1/activities/$B/grab $((r*10000000+5000000))))
  echo "round $r: baseline ${h[-1]} req/s, every grab succeeds ${s[-1]}, after the sell-out ${o[-1]}"
done
# Every grab of the first scenario must be 202 and every one of the second 409: the server's own
# count says whether anything else was answered.
curl -s http://127.0.0.1:$SP/metrics | awk '/^seckill_grabs_total/ && $2 > 0 {printf "  %s %d\n", $1, $2}'
grep -E 'Socket errors' $T/wrk.log | sort | uniq -c
python3 - "${h[*]}" "${s[*]}" "${o[*]}" <<'PY'
import sys,statistics as st
h,s,o=[list(map(float,a.split())) for a in sys.argv[1:4]]
H,S,O=st.median(h),st.median(s),st.median(o)
print(f"baseline {H:.0f} req/s | every grab succeeds {S:.0f} ({S/H:.2f}x) | after the sell-out {O:.0f} ({O/H:.2f}x)")
PY
