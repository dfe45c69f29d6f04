# Shared by the perf scripts: source it after setting T (the run's directory), SPID, RPID and BPID
# (serve's, Redis' and the bare handler's pids) and CONN, DUR.

# port prints a free TCP port on 127.0.0.1.
port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }

# cpu prints the CPU time of process $1 so far, utime+stime, in clock ticks.
cpu() { awk '{print $14+$15}' /proc/$1/stat; }

# run label probe wrk-arguments...: runs wrk, appends to $T/runs the line
#   label requests req/s serve-ticks redis-ticks baseline-ticks probe-deltas... seconds
# (probe is a function printing counters, read before and after the run: their differences), keeps
# wrk's output in $T/wrk.log, and prints the rate.
run() {
  local label=$1 probe=$2; shift 2
  local s0=$(cpu $SPID) r0=$(cpu $RPID) b0=$(cpu $BPID) p0=($($probe)) t0=$(date +%s.%N) out
  out=$(wrk -t1 -c$CONN -d$DUR --latency "$@" 2>&1)
  local p1=($($probe)) t1=$(date +%s.%N) deltas="" i
  for i in "${!p1[@]}"; do deltas+="$((${p1[$i]:-0}-${p0[$i]:-0})) "; done
  { echo "-- $label"; echo "$out"; } >>$T/wrk.log
  echo "$label $(echo "$out" | awk '/requests in/{print $1} /Requests\/sec/{print $2}' | tr '\n' ' ')$(($(cpu $SPID)-s0)) $(($(cpu $RPID)-r0)) $(($(cpu $BPID)-b0)) $deltas$(echo "$t1 - $t0" | bc)" >>$T/runs
  echo "$out" | awk '/Requests\/sec/{print $2}'
}
