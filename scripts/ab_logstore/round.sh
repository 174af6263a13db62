#!/bin/bash
# usage: round.sh STORE CLIENTS TAG  -> appends JSON lines to ${AB:-/tmp/ab}/results.jsonl
# WORKLOADS="write lock-uncontended" (the default) or any lockcell bench workloads; DUR=10s
STORE=$1; C=$2; TAG=$3
mkdir -p ${AB:-/tmp/ab}
BIN=${BIN:-$(cd "$(dirname "$0")/../.." && pwd)/bin}; DIR=${AB:-/tmp/ab}/d
REPL=127.0.0.1:17001,127.0.0.1:17002,127.0.0.1:17003,127.0.0.1:17004,127.0.0.1:17005
"$(dirname "$0")"/cell.sh start $STORE $DIR || exit 1
sleep 1
M=$($BIN/lockcell --replicas $REPL --json status | python3 -c 'import json,sys; print([r["status"]["self"] for r in json.load(sys.stdin) if r["is_master"]][0])')
MP=$(cat $DIR/r$M.pid)
cpu() { awk '{print $14+$15}' /proc/$1/stat; }
idx() { $BIN/lockcell --replicas $REPL --json status | python3 -c 'import json,sys; print([r["status"]["commit_index"] for r in json.load(sys.stdin) if r["is_master"]][0])'; }
for w in ${WORKLOADS:-write lock-uncontended}; do
  c0=$(cpu $MP); i0=$(idx); t0=$(date +%s.%N)
  out=$($BIN/lockcell --replicas $REPL bench $w --json --clients $C --duration ${DUR:-10s} --warmup 2s)
  c1=$(cpu $MP); i1=$(idx); t1=$(date +%s.%N)
  echo "$out" | python3 -c "
import json,sys
for line in sys.stdin:
    line=line.strip()
    if not line.startswith('{'): continue
    d=json.loads(line)
    ops=d.get('ops_per_s')
    print(json.dumps(dict(tag='$TAG',store='$STORE',clients=$C,workload='$w',ops_per_s=ops,p50_us=d.get('p50_us'),p99_us=d.get('p99_us'),errors=d.get('errors'),
      master_cpu_pct=100.0*($c1-$c0)/100.0/($t1-$t0), entries=$i1-$i0, wall_s=$t1-$t0)))
" >> ${AB:-/tmp/ab}/results.jsonl
done
"$(dirname "$0")"/cell.sh stop $DIR
tail -2 ${AB:-/tmp/ab}/results.jsonl
