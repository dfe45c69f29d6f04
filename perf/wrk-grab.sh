#!/usr/bin/env bash
# The grab path's throughput as a ratio to a bare Go handler, measured with wrk (a C load generator
# far cheaper per request than any Go client, so it does not compress the ratios). Run from the
# project root:
#   perf/wrk-grab.sh                          # serve with its worker (PostgreSQL on the same machine)
#   NO_WORKER=1 perf/wrk-grab.sh              # the API tier alone (serve --no-worker)
#   SERVE_FLAGS='--linger 0' perf/wrk-grab.sh # extra flags for serve
#   SECKILL_BIN=./seckill perf/wrk-grab.sh    # a binary built before, instead of ./cmd/seckill
#   ROUNDS=3 DUR=8s CONN=64 perf/wrk-grab.sh  # the defaults are 2 rounds of 8 s, 64 connections
#   ACK=1 perf/wrk-grab.sh                    # also a replica of the Redis, and a second serve with
#                                             # --ack-replicas 1 whose grabs take turns with the first's
# It builds ./cmd/seckill and ./perf/baseline, starts its own redis-server and a fresh PostgreSQL
# database, then alternates, ROUNDS times, DUR each with CONN connections and one wrk thread: the
# bare handler (perf/baseline, GET /hello), grabs that all succeed (stock 100,000,000, which no
# run sells out; a new user per request: perf/grab.lua), and grabs after the sell-out (stock 1,
# sold before the first run).
# Prints every run, then the medians and their ratios to the bare handler, the CPU each process
# under load spent per request (from /proc), and Redis' own count of the grab script's calls.
# Needs: wrk (apt-get install wrk), redis-server, redis-cli, python3, curl, psql, PostgreSQL on
# 127.0.0.1:5432 (user postgres, trust; PGURL=postgres://user:pass@host:port for another).
set -u
export PGOPTIONS=--client-min-messages=warning # no NOTICE for a database that was not there
T=$(mktemp -d); pids=()
PGURL=${PGURL:-postgres://postgres@127.0.0.1:5432}
cleanup() { # SIGTERM, up to 10 s to drain (serve's worker writes its backlog), then SIGKILL
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for i in $(seq 50); do alive=0; for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done; [ $alive = 0 ] && break; sleep 0.2; done
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; wait 2>/dev/null
  psql -qAt "$PGURL/postgres" -c "DROP DATABASE IF EXISTS wrk_grab WITH (FORCE)" >/dev/null 2>&1; rm -rf "$T"; }
trap cleanup EXIT
here=$(cd "$(dirname "$0")" && pwd)
DUR=${DUR:-8s}; CONN=${CONN:-64}; ROUNDS=${ROUNDS:-2}
for c in wrk redis-server redis-cli psql python3 curl; do command -v $c >/dev/null || { echo "$c missing (wrk: apt-get install wrk)"; exit 1; }; done
if [ -n "${SECKILL_BIN:-}" ]; then cp "$SECKILL_BIN" $T/seckill; else go build -o $T/seckill ./cmd/seckill || exit 1; fi
go build -o $T/baseline ./perf/baseline || exit 1
. "$here/lib.sh"
RP=$(port); SP=$(port); BP=$(port); QP=$(port); AP=$(port)
redis-server --port $RP --bind 127.0.0.1 --save "" --appendonly no --dir $T --daemonize no --repl-diskless-sync-delay 0 >$T/redis.log 2>&1 & pids+=($!)
psql -qAt "$PGURL/postgres" -c "DROP DATABASE IF EXISTS wrk_grab WITH (FORCE)" -c "CREATE DATABASE wrk_grab" >/dev/null || exit 1
sleep 0.5
$T/seckill serve --listen 127.0.0.1:$SP --redis redis://127.0.0.1:$RP/0 --db "$PGURL/wrk_grab?sslmode=disable" \
  --admin-token perf-admin-token-0123456789abcdef ${NO_WORKER:+--no-worker} ${SERVE_FLAGS:-} >$T/serve.log 2>&1 & pids+=($!)
$T/baseline -listen 127.0.0.1:$BP >$T/base.log 2>&1 & pids+=($!)
for i in $(seq 100); do curl -fs http://127.0.0.1:$SP/healthz >/dev/null && curl -fs http://127.0.0.1:$BP/hello >/dev/null && break; sleep 0.2; done
if [ -n "${ACK:-}" ]; then # a replica, and a serve that answers a grab once ACK replicas hold it
  mkdir -p $T/replica
  redis-server --port $QP --bind 127.0.0.1 --save "" --appendonly no --dir $T/replica --daemonize no --replicaof 127.0.0.1 $RP >$T/replica.log 2>&1 & pids+=($!)
  for i in $(seq 100); do redis-cli -p $QP info replication | grep -q master_link_status:up && break; sleep 0.2; done
  $T/seckill serve --listen 127.0.0.1:$AP --redis redis://127.0.0.1:$RP/0 --db "$PGURL/wrk_grab?sslmode=disable" \
    --admin-token perf-admin-token-0123456789abcdef ${NO_WORKER:+--no-worker} --ack-replicas $ACK ${SERVE_FLAGS:-} >$T/serve-ack.log 2>&1 & pids+=($!)
  for i in $(seq 100); do curl -fs http://127.0.0.1:$AP/healthz >/dev/null && break; sleep 0.2; done
fi
mk() { curl -s -X POST http://127.0.0.1:$SP/api/v1/activities -H 'Authorization: Bearer perf-admin-token-0123456789abcdef' -H 'Content-Type: application/json' \
  -d "{\"name\":\"perf\",\"stock\":$1,\"starts_at\":\"$(date -u -d '-5 sec' +%FT%TZ)\",\"ends_at\":\"$(date -u -d '+1 hour' +%FT%TZ)\"}" | python3 -c 'import json,sys;print(json.load(sys.stdin)["id"])'; }
A=$(mk 100000000) && B=$(mk 1) && C=$(mk 100000000) || { echo "cannot create activities"; tail -5 $T/serve.log; exit 1; }
curl -s -X POST http://127.0.0.1:$SP/api/v1/activities/$B/grab -H 'X-User-ID: 1' >/dev/null
mode="serve with its worker on PostgreSQL"; [ -n "${NO_WORKER:-}" ] && mode="serve --no-worker (the API alone)"
echo "$(date -u +%F), $(nproc) CPUs, wrk -t1 -c$CONN -d$DUR, $ROUNDS rounds, $mode${SERVE_FLAGS:+ $SERVE_FLAGS}${ACK:+, and with --ack-replicas $ACK}"
SPID=${pids[1]} RPID=${pids[0]} BPID=${pids[2]}
# the grab script's calls and µs in Redis (the runs' lines: ... script-calls script-usec seconds)
script() { redis-cli -p $RP info commandstats | tr -d '\r' | awk -F'[:=,]' '/^cmdstat_evalsha:/{print $3, $5}'; }
for r in $(seq $ROUNDS); do
  h=$(run baseline script http://127.0.0.1:$BP/hello)
  s=$(run succeed script -s "$here/grab.lua" http://127.0.0.1:$SP -- /api/v1/activities/$A/grab $((r*10000000)))
  o=$(run soldout script -s "$here/grab.lua" http://127.0.0.1:$SP -- /api/v1/activities/$B/grab $((r*10000000+5000000)))
  a=""; [ -n "${ACK:-}" ] && a=$(run acked script -s "$here/grab.lua" http://127.0.0.1:$AP -- /api/v1/activities/$C/grab $((r*10000000+7000000)))
  echo "round $r: baseline $h req/s, every grab succeeds $s, after the sell-out $o${ACK:+, every grab succeeds with --ack-replicas $ACK $a}"
done
# Every grab of the first scenario must be 202 and every one of the second 409: the server's own
# count says whether anything else was answered.
for p in $SP ${ACK:+$AP}; do curl -s http://127.0.0.1:$p/metrics -H 'Authorization: Bearer perf-admin-token-0123456789abcdef' | awk '/^seckill_grabs_total/ && $2 > 0 {printf "  %s %d\n", $1, $2
  if ($1 !~ /"(accepted|sold_out)"/) print "  warning: answers other than accepted and sold out" }'; done
awk '/^-- /{l=$2} /Socket errors/{print "  " l ": " $0}' $T/wrk.log
python3 - $T/runs $(getconf CLK_TCK) <<'PY'
import sys, statistics as st
runs, hz = {}, float(sys.argv[2])
for line in open(sys.argv[1]):
    label, *v = line.split()
    runs.setdefault(label, []).append([float(x) for x in v])
def med(label, i): return st.median(r[i] for r in runs[label])
H, S, O = med("baseline", 1), med("succeed", 1), med("soldout", 1)
print(f"baseline {H:.0f} req/s | every grab succeeds {S:.0f} ({S/H:.2f}x) | after the sell-out {O:.0f} ({O/H:.2f}x)")
if "acked" in runs:
    A = med("acked", 1)
    print(f"every grab succeeds with --ack-replicas: {A:.0f} ({A/H:.2f}x of the baseline, {A/S:.2f}x of the grabs without)")
def us(label, i): return st.median(r[i] / hz / r[0] * 1e6 for r in runs[label])
print(f"CPU per request: baseline {us('baseline', 4):.1f} µs | grab that succeeds: serve {us('succeed', 2):.1f} µs, "
      f"redis {us('succeed', 3):.1f} µs | grab after the sell-out: serve {us('soldout', 2):.1f} µs, redis {us('soldout', 3):.1f} µs")
calls = sum(r[5] for r in runs["succeed"]); usec = sum(r[6] for r in runs["succeed"]); n = sum(r[0] for r in runs["succeed"])
if calls:
    print(f"grab script while every grab succeeds: {calls:.0f} calls, {n/calls:.1f} grabs a call, {usec/calls:.0f} µs a call in Redis ({usec/n:.1f} µs a grab)")
PY
