#!/bin/bash
# 100 MB copies over lab 1G/100ms/1%: cold (--cold-start), then resumed from the path
# memory the copy before left, N rounds, each on a quiet disk (docs/performance.md,
# "Copy: a cold start"). Needs root. Usage: bench/copy_small.sh BIN ROUNDS
set -u
BIN=$1; N=$2
L=sm; D=/var/tmp/ab
mkdir -p $D
[ -f $D/key ] || echo "the shared key of the copy benches" > $D/key
[ -f $D/small.bin ] || head -c 100000000 /dev/urandom > $D/small.bin
$BIN lab down --name $L >/dev/null 2>&1
$BIN lab up --name $L --rtt 100ms --loss 1% --rate 1G --seed 1 >/dev/null || exit 1
mkdir -p $D/sdest
$BIN lab exec --name $L server -- $BIN --no-store serve -q -p 5311 --files $D/sdest --key $D/key > $D/sserve.log 2>&1 &
PID=$!
sleep 2
export XDG_STATE_HOME=$D/state; rm -rf $D/state
for i in $(seq 1 $N); do
  for mode in cold resumed; do
    rm -f $D/sdest/*.bin; sync; sleep 1
    flag=$([ $mode = cold ] && echo --cold-start || true)
    t0=$(date +%s.%N)
    $BIN lab exec --name $L client -- env XDG_STATE_HOME=$D/state $BIN --no-store copy $D/small.bin 10.77.0.2:s.bin -p 5311 --key $D/key -q --json $flag > $D/small-$mode-$i.json
    t1=$(date +%s.%N)
    python3 -c "
import json;d=json.load(open('$D/small-$mode-$i.json'))['copy']
print('$mode $i: %.2f s (wall in copy %.2f), resumed from %s, train %s' % ($t1-$t0, d['wall_s'], d.get('resumed_from_bps'), (d.get('start_estimate') or {}).get('bps')))"
  done
done
kill $PID; sleep 1; $BIN lab down --name $L >/dev/null 2>&1
