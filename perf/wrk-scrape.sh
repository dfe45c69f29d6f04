#!/usr/bin/env bash
# Grabs while /metrics is scraped 40 times a second, as a ratio to grabs alone, with many live sales
# (issue 28: 36-44 scrapes/s cut grabs from 11,566 to 113 req/s when every scrape read every sale).
# Run from the project root:
#   perf/wrk-scrape.sh                     # 500 live sales, 3 rounds, 8 s each, 64 connections
#   LIVE=100 ROUNDS=2 RATE=40 perf/wrk-scrape.sh
# It starts its own redis-server, a PostgreSQL database and `seckill serve` (with its worker),
# creates LIVE live sales with one order each, then alternates ROUNDS times: wrk grabs alone
# (every grab succeeds; a new user per request: perf/grab.lua); the same while a client scrapes
# /metrics RATE times a second with the admin token (the whole page, every sale's gauges); the
# same while a stranger does (no token: 401). Prints the medians, their ratios to grabs alone, and
# the Redis commands each scrape cost (INFO commandstats, XLEN: one a sale a read).
# Needs: wrk, redis-server, redis-cli, curl, psql, python3, PostgreSQL on 127.0.0.1:5432
# (user postgres, trust).
set -u
export PGOPTIONS=--client-min-messages=warning
T=$(mktemp -d); pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; sleep 0.5; for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; wait 2>/dev/null
  psql -qAt -h 127.0.0.1 -U postgres -d postgres -c "DROP DATABASE IF EXISTS wrk_scrape WITH (FORCE)" >/dev/null 2>&1; rm -rf "$T"; }
trap cleanup EXIT
DUR=${DUR:-8s}; CONN=${CONN:-64}; LIVE=${LIVE:-500}; ROUNDS=${ROUNDS:-3}; RATE=${RATE:-40}
TOKEN=perf-scrape-admin-token-0123456789
here=$(cd "$(dirname "$0")" && pwd)
for c in wrk redis-server redis-cli psql python3 curl; do command -v $c >/dev/null || { echo "$c missing (wrk: apt-get install wrk)"; exit 1; }; done
if [ -n "${SECKILL_BIN:-}" ]; then cp "$SECKILL_BIN" $T/seckill; else go build -o $T/seckill ./cmd/seckill || exit 1; fi
port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
RP=$(port); SP=$(port)
redis-server --port $RP --bind 127.0.0.1 --save "" --appendonly no --dir $T >$T/redis.log 2>&1 & pids+=($!)
psql -qAt -h 127.0.0.1 -U postgres -d postgres -c "DROP DATABASE IF EXISTS wrk_scrape WITH (FORCE)" -c "CREATE DATABASE wrk_scrape" >/dev/null || exit 1
sleep 0.5
$T/seckill serve --listen 127.0.0.1:$SP --redis redis://127.0.0.1:$RP/0 --db "postgres://postgres@127.0.0.1:5432/wrk_scrape?sslmode=disable" \
  --admin-token $TOKEN >$T/serve.log 2>&1 & pids+=($!)
U=http://127.0.0.1:$SP
for i in $(seq 100); do curl -fs $U/healthz >/dev/null && break; sleep 0.2; done
mk() { curl -s -X POST $U/api/v1/activities -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
  -d "{\"name\":\"perf\",\"stock\":$1,\"starts_at\":\"$(date -u -d '-5 sec' +%FT%TZ)\",\"ends_at\":\"$(date -u -d '+1 hour' +%FT%TZ)\"}" | python3 -c 'import json,sys;print(json.load(sys.stdin)["id"])'; }
A=$(mk 100000000) || { echo "cannot create activities"; tail -5 $T/serve.log; exit 1; }
echo "creating $((LIVE-1)) more live sales..."
for i in $(seq 2 $LIVE); do id=$(mk 100) && curl -s -o /dev/null -X POST $U/api/v1/activities/$id/grab -H "X-User-ID: $i"; done
series=$(curl -s $U/metrics -H "Authorization: Bearer $TOKEN" | grep -c '^seckill_redis_remaining{')
xlen() { redis-cli -p $RP info commandstats | tr -d '\r' | awk -F'[:=,]' '/^cmdstat_xlen:/{print $3}'; }
# scraper RATE token: scrapes RATE times a second on one keep-alive connection until killed; counts them
cat >$T/scrape.py <<'PY'
import http.client, sys, time
rate, token, port, out = float(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
h = {"Authorization": "Bearer " + token} if token else {}
n, codes, nxt = 0, {}, time.monotonic()
try:
    while True:
        c.request("GET", "/metrics", headers=h); r = c.getresponse(); r.read()
        n += 1; codes[r.status] = codes.get(r.status, 0) + 1
        with open(out, "w") as f: f.write(f"{n} {codes}\n")
        nxt += 1 / rate; time.sleep(max(0, nxt - time.monotonic()))
except Exception as e:
    open(out, "a").write(f"stopped: {e}\n")
PY
run() { # label first-user [scraper token]
  local label=$1 first=$2 sp="" x0 x1
  x0=$(xlen)
  if [ $# -ge 3 ]; then python3 $T/scrape.py $RATE "$3" $SP $T/scrape-$label-$first & sp=$!; fi
  out=$(wrk -t1 -c$CONN -d$DUR --latency -s "$here/grab.lua" $U -- /api/v1/activities/$A/grab $first 2>&1)
  if [ -n "$sp" ]; then kill $sp 2>/dev/null; wait $sp 2>/dev/null; fi
  x1=$(xlen); echo "-- $label"$'\n'"$out" >>$T/wrk.log
  echo "$label $(echo "$out" | awk '/Requests\/sec/{print $2}') $((${x1:-0}-${x0:-0})) $(cat $T/scrape-$label-$first 2>/dev/null | head -1)" >>$T/runs
  tail -1 $T/runs
}
echo "$(date -u +%F), $(nproc) CPUs, $LIVE live sales ($series with a gauge on /metrics), wrk -t1 -c$CONN -d$DUR, $ROUNDS rounds, scrapes at $RATE/s"
for r in $(seq $ROUNDS); do
  run alone $((r*10000000))
  run admin $((r*10000000+3000000)) $TOKEN
  run stranger $((r*10000000+6000000)) ""
done
grep -E 'Non-2xx|Socket errors' $T/wrk.log | sort | uniq -c
python3 - $T/runs "$DUR" <<'PY'
import sys, statistics as st, re
runs = {}
for line in open(sys.argv[1]):
    label, rps, xl, *rest = line.split(maxsplit=3) + [""]
    n = int(rest[0].split()[0]) if rest and rest[0].strip() and rest[0].split()[0].isdigit() else 0
    runs.setdefault(label, []).append((float(rps), int(xl), n))
A = st.median(r[0] for r in runs["alone"])
out = [f"grabs alone {A:.0f} req/s"]
for label in ("admin", "stranger"):
    R = st.median(r[0] for r in runs[label]); sc = sum(r[2] for r in runs[label]); xl = sum(r[1] for r in runs[label])
    out.append(f"scraped by {'the admin' if label == 'admin' else 'a stranger'} {R:.0f} ({R/A:.2f}x; {sc} scrapes, {xl/max(sc,1):.1f} XLEN a scrape)")
print(" | ".join(out))
PY
