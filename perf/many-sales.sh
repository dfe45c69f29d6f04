#!/usr/bin/env bash
# Many live sales on one `seckill serve` (worker on, PostgreSQL), measured
# with wrk as perf/wrk-grab.sh does. Run from the project root:
#   perf/many-sales.sh                # standalone Redis
#   CLUSTER=1 perf/many-sales.sh      # a 3-master Redis Cluster started here
# It alternates, twice, 8 s each with 64 connections: grabs that all succeed
# on one activity while it is the only live one, then the same after
# LIVE-1 more live activities were created (each with one order, then idle).
# It also times creating one more activity and looking up an unknown order
# id (curl, median of 20; serve runs with --miss-delay 0, so that the
# lookup's own cost is timed, not the pace of 404s). Needs wrk, redis-server (and redis-cli for
# CLUSTER=1), PostgreSQL on 127.0.0.1:5432 (user postgres, trust), python3.
set -u
T=$(mktemp -d); pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; sleep 0.5; for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  psql -qAt -h 127.0.0.1 -U postgres -d postgres -c "DROP DATABASE IF EXISTS many_sales WITH (FORCE)" >/dev/null 2>&1; rm -rf "$T"; }
trap cleanup EXIT
DUR=${DUR:-8s}; CONN=${CONN:-64}; LIVE=${LIVE:-500}
here=$(cd "$(dirname "$0")" && pwd)
grab=${GRAB_LUA:-$here/grab.lua}
command -v wrk >/dev/null || { echo "wrk missing: apt-get install wrk"; exit 1; }
if [ -n "${SECKILL:-}" ]; then cp "$SECKILL" $T/seckill; else go build -o $T/seckill ./cmd/seckill || exit 1; fi
port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
if [ -n "${CLUSTER:-}" ]; then
  addrs=()
  for i in 1 2 3; do
    # a cluster node also listens on its port + 10000: keep both free and valid
    p=$(python3 -c 'import socket,random
while True:
  p=random.randint(20000,50000)
  try:
    for q in (p,p+10000): s=socket.socket(); s.bind(("127.0.0.1",q)); s.close()
    print(p); break
  except OSError: pass'); mkdir -p $T/c$p
    redis-server --port $p --bind 127.0.0.1 --cluster-enabled yes --cluster-config-file $T/c$p/nodes.conf \
      --save "" --appendonly no --dir $T/c$p >$T/c$p/log 2>&1 & pids+=($!)
    addrs+=(127.0.0.1:$p)
  done
  sleep 0.5
  yes yes | redis-cli --cluster create "${addrs[@]}" --cluster-replicas 0 >$T/cluster.log 2>&1 || { cat $T/cluster.log; exit 1; }
  for i in $(seq 50); do redis-cli -p ${addrs[0]#*:} cluster info | grep -q 'cluster_state:ok' && break; sleep 0.2; done
  REDIS="redis+cluster://${addrs[0]}"
else
  RP=$(port)
  redis-server --port $RP --bind 127.0.0.1 --save "" --appendonly no --dir $T >$T/redis.log 2>&1 & pids+=($!)
  REDIS="redis://127.0.0.1:$RP/0"
fi
psql -qAt -h 127.0.0.1 -U postgres -d postgres -c "DROP DATABASE IF EXISTS many_sales WITH (FORCE)" -c "CREATE DATABASE many_sales" >/dev/null || exit 1
SP=$(port)
$T/seckill serve --listen 127.0.0.1:$SP --redis "$REDIS" --db "postgres://postgres@127.0.0.1:5432/many_sales?sslmode=disable" \
  --admin-token perf-admin-token-0123456789abcdef --miss-delay 0 >$T/serve.log 2>&1 & pids+=($!)
U=http://127.0.0.1:$SP
for i in $(seq 100); do curl -fs $U/healthz >/dev/null && break; sleep 0.2; done
mk() { curl -s -X POST $U/api/v1/activities -H 'Authorization: Bearer perf-admin-token-0123456789abcdef' -H 'Content-Type: application/json' \
  -d "{\"name\":\"perf\",\"stock\":$1,\"starts_at\":\"$(date -u -d '-5 sec' +%FT%TZ)\",\"ends_at\":\"$(date -u -d '+1 hour' +%FT%TZ)\"}" | python3 -c 'import json,sys;print(json.load(sys.stdin)["id"])'; }
A=$(mk 10000000) || { echo "cannot create activities"; tail -5 $T/serve.log; exit 1; }
run() { wrk -t1 -c$CONN -d$DUR --latency -s "$grab" $U -- /api/v1/activities/$A/grab $1 2>&1 | tee -a $T/wrk.log | awk '/Requests\/sec/{print $2}'; }
one=(); many=()
one+=($(run 10000000))
echo "creating $((LIVE-1)) more live activities..."
for i in $(seq 2 $LIVE); do
  id=$(mk 100) && curl -s -o /dev/null -X POST $U/api/v1/activities/$id/grab -H "X-User-ID: $i"
done
sleep 2
many+=($(run 20000000))
one_more() { curl -s -o /dev/null -w '%{time_total}\n' -X POST $U/api/v1/activities -H 'Authorization: Bearer perf-admin-token-0123456789abcdef' -H 'Content-Type: application/json' \
  -d "{\"name\":\"one more\",\"stock\":10,\"starts_at\":\"$(date -u -d '+1 min' +%FT%TZ)\",\"ends_at\":\"$(date -u -d '+1 hour' +%FT%TZ)\"}"; }
unknown() { curl -s -o /dev/null -w '%{time_total}\n' $U/api/v1/orders/$((RANDOM*100000+RANDOM)) -H 'Authorization: Bearer perf-admin-token-0123456789abcdef'; }
c=(); o=()
for i in $(seq 20); do c+=($(one_more)); o+=($(unknown)); done
many+=($(run 30000000))
live=$(curl -s $U/metrics -H 'Authorization: Bearer perf-admin-token-0123456789abcdef' | awk '/^go_goroutines /{print $2}')
conns=$( [ -n "${CLUSTER:-}" ] && echo "(cluster)" || redis-cli -p $RP client list | wc -l)
grep -E 'Non-2xx|Socket errors' $T/wrk.log | sort | uniq -c
grep -ciE 'level=(WARN|ERROR)' $T/serve.log | sed 's/^/serve warnings+errors: /'
python3 - "${one[*]}" "${many[*]}" "${c[*]}" "${o[*]}" "$live" "$conns" "$LIVE" <<'PY'
import sys,statistics as st
one,many,c,o=[list(map(float,a.split())) for a in sys.argv[1:5]]
O,M=st.median(one),st.median(many)
print(f"1 live activity {O:.0f} req/s | {sys.argv[7]} live {M:.0f} req/s ({M/O:.2f}x) | create one more: median {st.median(c)*1000:.1f} ms, max {max(c)*1000:.1f} ms | unknown order: median {st.median(o)*1000:.1f} ms, max {max(o)*1000:.1f} ms | goroutines {sys.argv[5]} | redis clients {sys.argv[6]}")
PY
