#!/usr/bin/env bash
# One hot sale over a 3-master Redis Cluster, through HTTP: starts three cluster nodes
# (redis-server --cluster-enabled, slots split by redis-cli --cluster create) and, for each
# crowd, a fresh PostgreSQL database and `seckill bench --buckets BUCKETS` (serve and its worker
# as the bench's child, grabs over HTTP): USERS users for STOCK units, 10% repeat clicks, first an
# even crowd, then one 90% of whose users are homed in two of the buckets (--crowd-skew 0.9).
# The bench prints its report, each master's share of the script calls (INFO commandstats), the
# sold-out answers that came before a grab still sold a unit, and the checks (sold == stock, none
# oversold, doubled or lost). Run from the root:
#   perf/cluster-buckets.sh                 # BUCKETS=16 USERS=200000 STOCK=20000
#   SECKILL_BIN=/path/to/seckill perf/cluster-buckets.sh
# Needs: redis-server, redis-cli, python3, psql, PostgreSQL on 127.0.0.1:5432 (user postgres, trust).
set -u
export PGOPTIONS=--client-min-messages=warning
T=$(mktemp -d); pids=(); dbs=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; sleep 0.5; for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  for d in "${dbs[@]}"; do psql -qAt -h 127.0.0.1 -U postgres -d postgres -c "DROP DATABASE IF EXISTS $d WITH (FORCE)" >/dev/null 2>&1; done; rm -rf "$T"; }
trap cleanup EXIT
BUCKETS=${BUCKETS:-16}; USERS=${USERS:-200000}; STOCK=${STOCK:-20000}
for c in redis-server redis-cli psql python3; do command -v $c >/dev/null || { echo "$c missing"; exit 1; }; done
if [ -n "${SECKILL_BIN:-}" ]; then cp "$SECKILL_BIN" $T/seckill; else go build -o $T/seckill ./cmd/seckill || exit 1; fi
source "$(dirname "$0")/lib.sh"
addrs=()
for i in 1 2 3; do
  p=$(port); mkdir -p $T/n$i
  redis-server --port $p --bind 127.0.0.1 --save "" --appendonly no --dir $T/n$i --cluster-enabled yes \
    --cluster-config-file nodes.conf --daemonize no >$T/n$i/log 2>&1 & pids+=($!)
  addrs+=(127.0.0.1:$p)
done
# each node answers before the cluster is made (a fixed pause was too short on a busy machine)
for a in "${addrs[@]}"; do
  for i in $(seq 100); do redis-cli -p ${a#*:} ping >/dev/null 2>&1 && break; sleep 0.1; done
done
redis-cli --cluster create "${addrs[@]}" --cluster-yes >$T/create.log 2>&1 || { cat $T/create.log; exit 1; }
for i in $(seq 50); do [ "$(redis-cli -h 127.0.0.1 -p ${addrs[0]#*:} cluster info | tr -d '\r' | grep cluster_state)" = cluster_state:ok ] && break; sleep 0.2; done
echo "cluster: ${addrs[*]}"
for skew in 0 0.9; do
  d=cluster_buckets_$$_${skew/./}; dbs+=($d)
  psql -qAt -h 127.0.0.1 -U postgres -d postgres -c "CREATE DATABASE $d" >/dev/null || exit 1
  requests=$(python3 -c "print(int($USERS/0.9)+1)")
  echo; echo "== buckets $BUCKETS, crowd-skew $skew"
  $T/seckill bench --redis redis+cluster://${addrs[0]} --db "postgres://postgres@127.0.0.1:5432/$d?sslmode=disable" \
    --buckets $BUCKETS --crowd-skew $skew --users $USERS --stock $STOCK --repeat 0.1 --requests $requests --concurrency 64 2>$T/bench.log
  rc=$?; [ $rc = 0 ] || { tail -20 $T/bench.log; exit $rc; }
done
