#!/bin/bash
# usage: cell.sh start STORE DIR | stop DIR
set -e
BIN=${BIN:-$(cd "$(dirname "$0")/../.." && pwd)/bin}
PEERS=1=127.0.0.1:17001/127.0.0.1:17101,2=127.0.0.1:17002/127.0.0.1:17102,3=127.0.0.1:17003/127.0.0.1:17103,4=127.0.0.1:17004/127.0.0.1:17104,5=127.0.0.1:17005/127.0.0.1:17105
REPL=127.0.0.1:17001,127.0.0.1:17002,127.0.0.1:17003,127.0.0.1:17004,127.0.0.1:17005
case $1 in
start)
  STORE=$2; DIR=$3; rm -rf $DIR; mkdir -p $DIR
  for i in 1 2 3 4 5; do
    $BIN/lockcelld serve --insecure --id $i --data $DIR/r$i --peers $PEERS --log-store $STORE --max-conns-per-ip 4096 >$DIR/r$i.log 2>&1 &
    echo $! > $DIR/r$i.pid
  done
  for t in $(seq 1 100); do
    if $BIN/lockcell --replicas $REPL status >/dev/null 2>&1; then exit 0; fi
    sleep 0.2
  done
  echo "no master" >&2; exit 1;;
stop)
  DIR=$2
  for i in 1 2 3 4 5; do kill $(cat $DIR/r$i.pid) 2>/dev/null || true; done
  for i in 1 2 3 4 5; do while kill -0 $(cat $DIR/r$i.pid) 2>/dev/null; do sleep 0.1; done; done;;
esac
