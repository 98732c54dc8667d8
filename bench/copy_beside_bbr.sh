#!/bin/bash
# A cold 100 MB copy started 3 s into a TCP BBR stream (`stream -C bbr -t 14`) over lab
# 100 Mbit/s, 50 ms: per second the server interface's received bits and the stream's own
# intervals (the copy's share is the rest). Needs root. Usage: bench/copy_beside_bbr.sh BIN
set -u
BIN=$1; L=bb; D=/var/tmp/ab
mkdir -p $D
[ -f $D/key ] || echo "the shared key of the copy benches" > $D/key
[ -f $D/small.bin ] || head -c 100000000 /dev/urandom > $D/small.bin
$BIN lab down --name $L >/dev/null 2>&1
$BIN lab up --name $L --rtt 50ms --rate 100M --seed 1 >/dev/null || exit 1
NS=lrlab-$L-server
IF=$(ip -n $NS -o link | awk -F': ' '$2!="lo"{print $2}' | cut -d@ -f1 | head -1)
mkdir -p $D/bdest; rm -f $D/bdest/*
$BIN lab exec --name $L server -- $BIN --no-store serve -q --files $D/bdest --key $D/key > $D/bserve.log 2>&1 &
PID=$!
sleep 2
( for i in $(seq 0 16); do echo "$(date +%s.%N) $(ip netns exec $NS cat /sys/class/net/$IF/statistics/rx_bytes)"; sleep 1; done ) > $D/bbr-rx.txt &
$BIN lab exec --name $L client -- $BIN --no-store stream 10.77.0.2 -C bbr -t 14 -i 1 --key $D/key --json > $D/bbr-stream.json 2>$D/bbr-stream.err &
SP=$!
sleep 3
$BIN lab exec --name $L client -- $BIN --no-store copy $D/small.bin 10.77.0.2:b.bin --key $D/key -q --json --cold-start > $D/bbr-copy.json
wait $SP
sleep 2
kill $PID; sleep 1; $BIN lab down --name $L >/dev/null 2>&1
python3 - <<'PY'
import json
D="/var/tmp/ab"
rx=[tuple(map(float,l.split())) for l in open(f"{D}/bbr-rx.txt")]
s=json.load(open(f"{D}/bbr-stream.json"))
iv=[i.get("receiver_bps", i.get("bps")) for i in s["intervals"]]
c=json.load(open(f"{D}/bbr-copy.json"))["copy"]
print("stream intervals (Mbit/s):", [round(x/1e6,1) for x in iv])
tot=[ (rx[i+1][1]-rx[i][1])*8/(rx[i+1][0]-rx[i][0])/1e6 for i in range(len(rx)-1)]
print("iface rx per second (Mbit/s):", [round(x,1) for x in tot])
print("copy: %.2f s, train %s, jumped %s" % (c["wall_s"], (c.get("start_estimate") or {}).get("bps"), (c.get("start_estimate") or {}).get("jumped_to_bps")))
PY
