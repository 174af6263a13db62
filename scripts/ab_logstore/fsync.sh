#!/bin/bash
# usage: fsync.sh STORE WORKLOAD TAG -> strace counts of master and one follower over a fixed load
STORE=$1; W=$2; TAG=$3
mkdir -p ${AB:-/tmp/ab}
BIN=${BIN:-$(cd "$(dirname "$0")/../.." && pwd)/bin}; DIR=${AB:-/tmp/ab}/d
REPL=127.0.0.1:17001,127.0.0.1:17002,127.0.0.1:17003,127.0.0.1:17004,127.0.0.1:17005
"$(dirname "$0")"/cell.sh start $STORE $DIR || exit 1
sleep 1
M=$($BIN/lockcell --replicas $REPL --json status | python3 -c 'import json,sys; print([r["status"]["self"] for r in json.load(sys.stdin) if r["is_master"]][0])')
F=$(( M % 5 + 1 ))
idx() { $BIN/lockcell --replicas $REPL --json status | python3 -c 'import json,sys; print([r["status"]["commit_index"] for r in json.load(sys.stdin) if r["is_master"]][0])'; }
$BIN/lockcell --replicas $REPL bench $W --json --clients 16 --duration 14s --warmup 1s > ${AB:-/tmp/ab}/fs-$TAG-bench.json &
BP=$!
sleep 3
OUT=${AB:-/tmp/ab}/fs-$TAG
for who in M F; do
  id=${!who}; pid=$(cat $DIR/r$id.pid)
  strace -f -c -e trace=fsync,fdatasync,msync,sync_file_range,pwrite64,write -o $OUT-$who.txt -p $(ls /proc/$pid/task | paste -sd,) 2>/dev/null &
  eval S$who=$!
done
sleep 0.5; i0=$(idx)
sleep 8
i1=$(idx)
kill -INT $SM $SF; wait $SM $SF 2>/dev/null
wait $BP
echo "$TAG store=$STORE workload=$W master=$M follower=$F entries=$((i1-i0)) (over ~8s)" | tee $OUT-summary.txt
"$(dirname "$0")"/cell.sh stop $DIR
