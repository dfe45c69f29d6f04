#!/usr/bin/env bash
# The cost of verified identity and rate limits on the grab path, measured
# with wrk as perf/wrk-grab.sh does. Run from the project root:
#   perf/wrk-auth.sh                   # serve with its worker (PostgreSQL on the same machine)
#   NO_WORKER=1 perf/wrk-auth.sh       # the API tier alone (serve --no-worker)
#   KEEP=/tmp/wrk-auth perf/wrk-auth.sh # keep the wrk and serve logs there
# It starts its own redis-server, a fresh PostgreSQL database and four
# `seckill serve` (one measured at a time, the others idle):
#   off     buyers named by X-User-ID, no rate limit (the defaults)
#   on      --identity jwt (HS256, a token per user, verified) and per-user
#           and per-address limits kept in memory, generous enough that
#           none refuses
#   redis   the same, with the limits kept in Redis (--rate-limit-store redis)
#   off2    the defaults again, as a second reference started last
# and alternates, twice, 8 s each with 64 connections: grabs that all
# succeed (stock 1,000,000, a new user per request), grabs after the
# sell-out (a new user per request: no verified token is ever reused), and
# grabs after the sell-out by 10,000 users clicking again and again (as a
# real crowd does: their tokens are verified once, then cached). Every run
# of a round sends the same users; the tokens are minted beforehand
# (`seckill token`), so wrk only reads them. Prints medians, and ratios to
# off. Needs: wrk, redis-server, PostgreSQL on 127.0.0.1:5432 (user
# postgres, trust), python3.
set -u
T=$(mktemp -d); pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; sleep 0.5; for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  psql -qAt -h 127.0.0.1 -U postgres -d postgres -c "DROP DATABASE IF EXISTS wrk_auth WITH (FORCE)" >/dev/null 2>&1
  if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp $T/*.log "$KEEP"/; fi; rm -rf "$T"; }
trap cleanup EXIT
DUR=${DUR:-8s}; CONN=${CONN:-64}; USERS=${USERS:-400000}
command -v wrk >/dev/null || { echo "wrk missing: apt-get install wrk"; exit 1; }
go build -o $T/seckill ./cmd/seckill || exit 1
port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
RP=$(port)
redis-server --port $RP --bind 127.0.0.1 --save "" --appendonly no --dir $T --daemonize no >$T/redis.log 2>&1 & pids+=($!)
psql -qAt -h 127.0.0.1 -U postgres -d postgres -c "DROP DATABASE IF EXISTS wrk_auth WITH (FORCE)" -c "CREATE DATABASE wrk_auth" >/dev/null || exit 1
sleep 0.5
S=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n') # passed in the environment, not on command lines
common=(--redis redis://127.0.0.1:$RP/0 --db "postgres://postgres@127.0.0.1:5432/wrk_auth?sslmode=disable" --admin-token perf-admin-token-0123456789abcdef ${NO_WORKER:+--no-worker})
limits=(--identity jwt --user-rate 1000 --user-burst 1000 --ip-rate 1000000 --ip-burst 1000000)
declare -A url
for mode in off on redis off2; do
  p=$(port); url[$mode]=http://127.0.0.1:$p
  case $mode in
    off|off2) extra=() ;;
    on) extra=("${limits[@]}") ;;
    redis) extra=("${limits[@]}" --rate-limit-store redis) ;;
  esac
  if [ ${#extra[@]} -gt 0 ]; then
    SECKILL_JWT_SECRET=$S $T/seckill serve --listen 127.0.0.1:$p --redis-prefix $mode "${common[@]}" "${extra[@]}" >$T/serve-$mode.log 2>&1 & pids+=($!)
  else
    $T/seckill serve --listen 127.0.0.1:$p --redis-prefix $mode "${common[@]}" >$T/serve-$mode.log 2>&1 & pids+=($!)
  fi
done
for mode in off on redis off2; do
  for i in $(seq 100); do curl -fs ${url[$mode]}/healthz >/dev/null && break; sleep 0.2; done
done
mk() { curl -s -X POST $1/api/v1/activities -H 'Authorization: Bearer perf-admin-token-0123456789abcdef' -H 'Content-Type: application/json' \
  -d "{\"name\":\"perf\",\"stock\":$2,\"starts_at\":\"$(date -u -d '-5 sec' +%FT%TZ)\",\"ends_at\":\"$(date -u -d '+1 hour' +%FT%TZ)\"}" | python3 -c 'import json,sys;print(json.load(sys.stdin)["id"])'; }
declare -A A B
for mode in off on redis off2; do
  A[$mode]=$(mk ${url[$mode]} 1000000) && B[$mode]=$(mk ${url[$mode]} 1) || { echo "cannot create activities on $mode"; tail -5 $T/serve-$mode.log; exit 1; }
done
# Sell B out on each, with user 1.
tok1=$(SECKILL_JWT_SECRET=$S $T/seckill token --user 1)
for mode in off off2; do curl -s -X POST ${url[$mode]}/api/v1/activities/${B[$mode]}/grab -H 'X-User-ID: 1' >/dev/null; done
for mode in on redis; do curl -s -X POST ${url[$mode]}/api/v1/activities/${B[$mode]}/grab -H "Authorization: Bearer $tok1" >/dev/null; done

# The header values of each round and scenario: user ids, and their tokens.
for r in 1 2; do for s in 0 1 2; do
  first=$((r*10000000 + s*3000000)) n=$USERS
  [ $s = 2 ] && n=10000
  seq $first $((first + n - 1)) >$T/ids-$r-$s
  SECKILL_JWT_SECRET=$S $T/seckill token --user $first --count $n | sed 's/^/Bearer /' >$T/tok-$r-$s
done; done
cat >$T/grab.lua <<'EOF'
-- POST to the grab path; one header value per request, read from a file.
-- usage: wrk ... -s grab.lua URL -- PATH HEADER FILE
local counter, values = 0, {}
function init(args)
  path, header = args[1], args[2]
  for line in io.lines(args[3]) do values[#values + 1] = line end
end
function request()
  counter = counter + 1
  return wrk.format("POST", path, {[header] = values[(counter - 1) % #values + 1]}, nil)
end
EOF
run() { # mode activity header file scenario
  echo "-- round $r scenario $5" >>$T/wrk-$1.log
  wrk -t1 -c$CONN -d$DUR --latency -s $T/grab.lua ${url[$1]} -- /api/v1/activities/$2/grab "$3" "$4" 2>&1 | tee -a $T/wrk-$1.log |
    awk -v users=$(wc -l <"$4") -v s=$5 '/requests in/ && $1 > users && s < 2 {print "warning: " $1 " requests for " users " users: some repeated" > "/dev/stderr"} /Requests\/sec/{print $2}'
}
declare -A res
for r in 1 2; do
  for s in 0 1 2; do
    for mode in off on redis off2; do
      if [ $s = 0 ]; then act=${A[$mode]}; else act=${B[$mode]}; fi
      case $mode in off|off2) h=X-User-ID f=$T/ids-$r-$s ;; *) h=Authorization f=$T/tok-$r-$s ;; esac
      res[$mode-$s]+=" $(run $mode $act $h $f $s)"
    done
  done
done
for mode in off on redis off2; do
  echo "== $mode"; grep -E 'Non-2xx|Socket errors|Latency  ' $T/wrk-$mode.log | sort | uniq -c
done
for k in "${!res[@]}"; do echo "runs $k:${res[$k]}"; done | sort
python3 - "${res[off-0]}" "${res[on-0]}" "${res[redis-0]}" "${res[off2-0]}" "${res[off-1]}" "${res[on-1]}" "${res[redis-1]}" "${res[off2-1]}" \
  "${res[off-2]}" "${res[on-2]}" "${res[redis-2]}" "${res[off2-2]}" <<'PY'
import sys, statistics as st
v = [st.median(map(float, a.split())) for a in sys.argv[1:]]
for name, (off, on, redis, off2) in (("every grab succeeds", v[0:4]), ("after the sell-out, new users", v[4:8]),
                                     ("after the sell-out, 10k users again", v[8:12])):
    print(f"{name}: off {off:.0f} req/s, off again {off2:.0f} ({off2/off:.2f}x) | "
          f"JWT + limits in memory {on:.0f} ({on/off:.2f}x) | JWT + limits in Redis {redis:.0f} ({redis/off:.2f}x)")
PY
