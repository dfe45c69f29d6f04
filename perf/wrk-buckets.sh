#!/usr/bin/env bash
# What splitting one sale's stock into buckets costs on one Redis: wrk against `seckill serve`
# (with its worker, on PostgreSQL) on a sale of 1 bucket and a sale of BUCKETS buckets,
# alternating (ABBA) ROUNDS times, 8 s each, 64 connections, every grab succeeding (stock
# 100,000,000: the runs never sell it out; a new user per request). For each run: the grab rate,
# and Redis' CPU per accepted grab (used_cpu_user + used_cpu_sys of INFO cpu, over the run, by
# the 202s of the run), serve's CPU per accepted grab (its API and its worker), and PostgreSQL's
# (every postgres process of the machine: run it on a machine that has no other database work). Prints the
# medians and the ratios buckets/one bucket, and the median of each round's ratio (its two runs
# side by side). Run from the root:
#   perf/wrk-buckets.sh                    # BUCKETS=16 ROUNDS=3 DUR=8s CONN=64
#   SECKILL_BIN=/path/to/seckill perf/wrk-buckets.sh   # a binary built before
# Needs: wrk, curl, python3, bc, redis-server, redis-cli, PostgreSQL on 127.0.0.1:5432 (user
# postgres, trust). The wrk script is perf/grab.lua.
set -u
T=$(mktemp -d); pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; sleep 0.5; for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  psql -qAt -h 127.0.0.1 -U postgres -d postgres -c "DROP DATABASE IF EXISTS wrk_buckets WITH (FORCE)" >/dev/null 2>&1; rm -rf "$T"; }
trap cleanup EXIT
GRAB_LUA=$(cd "$(dirname "$0")" && pwd)/grab.lua
BUCKETS=${BUCKETS:-16}; ROUNDS=${ROUNDS:-3}; DUR=${DUR:-8s}; CONN=${CONN:-64}
for c in wrk curl redis-server redis-cli psql python3 bc; do command -v $c >/dev/null || { echo "$c missing"; exit 1; }; done
if [ -n "${SECKILL_BIN:-}" ]; then cp "$SECKILL_BIN" $T/seckill; else go build -o $T/seckill ./cmd/seckill || exit 1; fi
source "$(dirname "$0")/lib.sh" # port, cpu
RP=$(port); SP=$(port)
redis-server --port $RP --bind 127.0.0.1 --save "" --appendonly no --dir $T --daemonize no >$T/redis.log 2>&1 & pids+=($!)
psql -qAt -h 127.0.0.1 -U postgres -d postgres -c "DROP DATABASE IF EXISTS wrk_buckets WITH (FORCE)" -c "CREATE DATABASE wrk_buckets" >/dev/null || exit 1
sleep 0.5
$T/seckill serve --listen 127.0.0.1:$SP --redis redis://127.0.0.1:$RP/0 --db "postgres://postgres@127.0.0.1:5432/wrk_buckets?sslmode=disable" \
  --admin-token perf-admin-token-0123456789abcdef >$T/serve.log 2>&1 & pids+=($!); SPID=$!
for i in $(seq 100); do curl -fs http://127.0.0.1:$SP/healthz >/dev/null && break; sleep 0.2; done
mk() { curl -s -X POST http://127.0.0.1:$SP/api/v1/activities -H 'Authorization: Bearer perf-admin-token-0123456789abcdef' -H 'Content-Type: application/json' \
  -d "{\"name\":\"perf\",\"stock\":100000000,\"buckets\":$1,\"starts_at\":\"$(date -u -d '-5 sec' +%FT%TZ)\",\"ends_at\":\"$(date -u -d '+1 hour' +%FT%TZ)\"}" | python3 -c 'import json,sys;print(json.load(sys.stdin)["id"])'; }
A=$(mk 1) && B=$(mk $BUCKETS) || { echo "cannot create activities"; tail -5 $T/serve.log; exit 1; }
# scpu: serve's CPU so far, utime+stime, in seconds
scpu() { echo "scale=2; $(cpu $SPID) / $(getconf CLK_TCK)" | bc; }
# pgcpu: the CPU so far of every postgres process, in seconds
pgcpu() { cat /proc/[0-9]*/stat 2>/dev/null | awk -v hz=$(getconf CLK_TCK) '$2 ~ /^\(postgres/ {s+=$14+$15} END{printf "%.2f", s/hz}'; }
rcpu() { redis-cli -p $RP info cpu | awk -F: '/^used_cpu_(user|sys):/{s+=$2} END{printf "%.6f", s}'; }
# cmdstats FILE: each command's calls and usec (INFO commandstats), one per line
cmdstats() { redis-cli -p $RP info commandstats | tr -d '\r' | sed -n 's/^cmdstat_\([^:]*\):calls=\([0-9]*\),usec=\([0-9]*\),.*/\1 \2 \3/p' | sort > "$1"; }
# run ID USER_BASE: prints "req/s accepted redis_cpu_seconds serve_cpu_seconds postgres_cpu_seconds"; each command's calls and usec per
# accepted grab go to $T/cmds
run() {
  c0=$(rcpu); s0=$(scpu); p0=$(pgcpu); cmdstats $T/before
  out=$(wrk -t1 -c$CONN -d$DUR --latency -s "$GRAB_LUA" http://127.0.0.1:$SP -- /api/v1/activities/$1/grab $2 2>&1)
  c1=$(rcpu); s1=$(scpu); p1=$(pgcpu); cmdstats $T/after; echo "$out" >> $T/wrk.log
  rate=$(echo "$out" | awk '/Requests\/sec/{print $2}')
  reqs=$(echo "$out" | awk '/requests in/{print $1}')
  bad=$(echo "$out" | awk '/Non-2xx/{print $NF}')
  echo "$rate $((reqs - ${bad:-0})) $(python3 -c "print(round($c1-$c0, 3), round($s1-$s0, 2), round($p1-$p0, 2))")"
  join -a2 $T/before $T/after | awk -v n=$((reqs - ${bad:-0})) -v id=$1 \
    'NF==5{printf "%s %s %.3f %.3f\n", id, $1, ($4-$2)/n, ($5-$3)/n} NF==3{printf "%s %s %.3f %.3f\n", id, $1, $2/n, $3/n}' >> $T/cmds
}
one=(); many=(); u=0
for r in $(seq $ROUNDS); do
  order="1 $BUCKETS"; [ $((r % 2)) = 0 ] && order="$BUCKETS 1" # ABBA
  for n in $order; do
    u=$((u+1)); id=$A; [ $n != 1 ] && id=$B
    res=$(run $id $((u*10000000)))
    echo "round $r, $n bucket(s): $res (req/s, accepted, redis cpu s, serve cpu s, postgres cpu s)" >&2
    if [ $n = 1 ]; then one+=("$res"); else many+=("$res"); fi
  done
done
grep -E 'Non-2xx|Socket errors' $T/wrk.log | sort | uniq -c
# Per accepted grab, averaged over the runs: each command's calls and Redis microseconds.
echo "per accepted grab (calls, us), activity $A (1 bucket) and $B ($BUCKETS buckets):"
awk '{c[$1" "$2]+=$3; u[$1" "$2]+=$4; k[$1" "$2]++} END{for (x in c) printf "  %-28s %8.3f %8.3f\n", x, c[x]/k[x], u[x]/k[x]}' $T/cmds | sort -k1,1n -k4,4nr
python3 - "$BUCKETS" "$(printf '%s;' "${one[@]}")" "$(printf '%s;' "${many[@]}")" <<'PY'
import sys,statistics as st
n=sys.argv[1]
def parse(s): return [tuple(map(float,x.split())) for x in s.split(';') if x.strip()]
one,many=parse(sys.argv[2]),parse(sys.argv[3])
r1,rn=st.median(x[0] for x in one),st.median(x[0] for x in many)
c1,cn=st.median(1e6*x[2]/x[1] for x in one),st.median(1e6*x[2]/x[1] for x in many)
print(f"grab rate: 1 bucket {r1:.0f} req/s, {n} buckets {rn:.0f} req/s: {rn/r1:.3f}x")
# The two runs of a round are next to each other: their ratio sees the same machine.
print("grab rate, the rounds' ratios: " + " ".join(f"{m[0]/o[0]:.3f}" for o, m in zip(one, many)) +
      f", median {st.median(m[0]/o[0] for o, m in zip(one, many)):.3f}x")
print(f"redis cpu per accepted grab: 1 bucket {c1:.2f} us, {n} buckets {cn:.2f} us: {cn/c1:.3f}x")
s1,sn=st.median(1e6*x[3]/x[1] for x in one),st.median(1e6*x[3]/x[1] for x in many)
print(f"serve cpu per accepted grab (api and worker): 1 bucket {s1:.2f} us, {n} buckets {sn:.2f} us: {sn/s1:.3f}x")
p1,pn=st.median(1e6*x[4]/x[1] for x in one),st.median(1e6*x[4]/x[1] for x in many)
print(f"postgres cpu per accepted grab: 1 bucket {p1:.2f} us, {n} buckets {pn:.2f} us: {pn/p1:.3f}x")
PY
