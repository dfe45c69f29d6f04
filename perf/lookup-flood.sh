#!/usr/bin/env bash
# Does a flood of order lookups slow the orders down? Grab-to-confirmed latency as a buyer sees it
# (perf/confirm.py: one buyer at a time grabs, then polls GET /orders/{id} until the order is
# confirmed), with and without a flood of lookups of random order ids on the same instance (wrk,
# perf/order-ids.lua), and the database transactions the flood cost. Run from the project root:
#   perf/lookup-flood.sh                      # serve with its worker, PostgreSQL on the same machine
#   FLOOD=sale perf/lookup-flood.sh           # the flood's ids name the live sale (any local part)
#   FLOOD=path perf/lookup-flood.sh           # a flood of GET /api/v1/none-such instead (404, no work)
#   ROUNDS=3 DUR=10 CONN=64 POLL_MS=2 perf/lookup-flood.sh   # the defaults
#   SECKILL_BIN=./seckill perf/lookup-flood.sh                # a binary built before
# It builds ./cmd/seckill, starts its own redis-server, a fresh PostgreSQL database and
# `seckill serve` on them, creates a sale, and then alternates, ROUNDS times, DUR seconds of the
# buyer alone and DUR seconds of the buyer under a flood of CONN connections (one wrk thread).
# Then it counts the database's transactions (pg_stat_database) of DUR seconds of the flood alone
# and of DUR seconds of nothing, each followed by 11 s of quiet, so that PostgreSQL's statistics
# (which an idle backend flushes within 10 s) hold every transaction of the phase.
# Prints every phase, then the medians of p50 and their ratio (p50 without / p50 with), the
# flood's rate, and its transactions per lookup (those of the flood alone less those of nothing).
# Needs: wrk, redis-server, python3, curl, psql, PostgreSQL on 127.0.0.1:5432 (user postgres,
# trust; PGURL=postgres://user:pass@host:port for another).
set -u
export PGOPTIONS=--client-min-messages=warning
T=$(mktemp -d); pids=()
PGURL=${PGURL:-postgres://postgres@127.0.0.1:5432}
DB=lookup_flood
cleanup() { # nothing of the run is kept: no need to let serve drain
  [ ${#pids[@]} -gt 0 ] && { kill "${pids[@]}" 2>/dev/null; sleep 1; kill -9 "${pids[@]}" 2>/dev/null; wait 2>/dev/null; }
  psql -qAt "$PGURL/postgres" -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null 2>&1; rm -rf "$T"; }
trap cleanup EXIT
here=$(cd "$(dirname "$0")" && pwd)
DUR=${DUR:-10}; CONN=${CONN:-64}; ROUNDS=${ROUNDS:-3}; POLL_MS=${POLL_MS:-2}
for c in wrk redis-server psql python3 curl; do command -v $c >/dev/null || { echo "$c missing"; exit 1; }; done
if [ -n "${SECKILL_BIN:-}" ]; then cp "$SECKILL_BIN" $T/seckill; else go build -o $T/seckill ./cmd/seckill || exit 1; fi
port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
RP=$(port); SP=$(port)
redis-server --port $RP --bind 127.0.0.1 --save "" --appendonly no --dir $T --daemonize no >$T/redis.log 2>&1 & pids+=($!)
psql -qAt "$PGURL/postgres" -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB" >/dev/null || exit 1
sleep 0.5
$T/seckill serve --listen 127.0.0.1:$SP --redis redis://127.0.0.1:$RP/0 --db "$PGURL/$DB?sslmode=disable" \
  --admin-token perf-lookup-flood-token ${SERVE_FLAGS:-} >$T/serve.log 2>&1 & pids+=($!)
for i in $(seq 100); do curl -fs http://127.0.0.1:$SP/healthz >/dev/null && break; sleep 0.2; done
A=$(curl -s -X POST http://127.0.0.1:$SP/api/v1/activities -H 'Authorization: Bearer perf-lookup-flood-token' \
  -H 'Content-Type: application/json' \
  -d "{\"name\":\"perf\",\"stock\":100000000,\"starts_at\":\"$(date -u -d '-5 sec' +%FT%TZ)\",\"ends_at\":\"$(date -u -d '+1 hour' +%FT%TZ)\"}" |
  python3 -c 'import json,sys;print(json.load(sys.stdin)["id"])') || { echo "cannot create the sale"; tail -5 $T/serve.log; exit 1; }
flood=(-s "$here/order-ids.lua" http://127.0.0.1:$SP)
what="random order ids"
case ${FLOOD:-random} in
  sale) flood+=(-- "$A"); what="order ids of the live sale";;
  path) flood+=(-- /api/v1/none-such); what="GET /api/v1/none-such";;
esac
xacts() { psql -qAt "$PGURL/$DB" -c "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = '$DB'"; }
echo "$(date -u +%F), $(nproc) CPUs, $ROUNDS rounds of ${DUR} s, a buyer polling every ${POLL_MS} ms," \
  "a flood of wrk -t1 -c$CONN of $what, serve with its worker on PostgreSQL${SERVE_FLAGS:+ $SERVE_FLAGS}"
user=0
for r in $(seq $ROUNDS); do
  user=$((user + 1000000)); alone=$(python3 "$here/confirm.py" http://127.0.0.1:$SP $A $user $DUR $POLL_MS) || exit 1
  wrk -t1 -c$CONN -d$((DUR + 2))s "${flood[@]}" >$T/wrk.$r 2>&1 & w=$!
  sleep 1
  user=$((user + 1000000)); under=$(python3 "$here/confirm.py" http://127.0.0.1:$SP $A $user $DUR $POLL_MS) || exit 1
  wait $w
  rate=$(awk '/Requests\/sec/{print $2}' $T/wrk.$r); non2=$(awk '/Non-2xx or 3xx/{print $NF}' $T/wrk.$r)
  echo "round $r: alone: $alone | under the flood: $under | flood: $rate lookups/s, ${non2:-0} answers not 2xx"
  echo "$alone $under $rate" >>$T/runs
done
sleep 11; x0=$(xacts); sleep $DUR; sleep 11; x1=$(xacts)
wrk -t1 -c$CONN -d${DUR}s "${flood[@]}" >$T/wrk.count 2>&1
sleep 11; x2=$(xacts)
reqs=$(awk '/requests in/{print $1}' $T/wrk.count)
echo "transactions: $((x1 - x0)) in ${DUR} s of nothing, $((x2 - x1)) in ${DUR} s of the flood alone ($reqs lookups)"
echo "$((x1 - x0)) $((x2 - x1)) $reqs" >$T/count
echo "(each phase: samples p50 p90 p99 max, in ms)"
awk '/Socket errors/{print "  wrk: " $0}' $T/wrk.* 2>/dev/null
python3 - $T/runs $T/count <<'PY'
import sys, statistics as st
runs = [[float(x) for x in l.split()] for l in open(sys.argv[1])]
idle, flood, reqs = (float(x) for x in open(sys.argv[2]).read().split())
alone, under = st.median(r[1] for r in runs), st.median(r[6] for r in runs)
print(f"grab-to-confirmed p50: alone {alone:.2f} ms, under the flood {under:.2f} ms: ratio {alone/under:.2f}"
      f" (p90 {st.median(r[2] for r in runs):.2f} and {st.median(r[7] for r in runs):.2f} ms)")
print(f"flood: {st.median(r[10] for r in runs):.0f} lookups/s; database transactions a lookup: {(flood - idle)/reqs:.4f}"
      f" ({flood:.0f} with the flood less {idle:.0f} without, over {reqs:.0f} lookups)")
PY
