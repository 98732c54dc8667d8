#!/bin/bash
# Two builds' cold copies, interleaved in one lab (docs/performance.md, "Copy: a cold
# start"): a 1 GiB random file over `lab --rtt $RTT --loss 1% --rate 1G --seed 1` (RTT
# 200ms unless set), `copy --cold-start`, each build's own `serve --files`, A then B each
# round, goodput over the client command's wall time with the steal time over it and the
# packet train's estimate. TRACE=1 keeps each copy's rate trace (LINERATE_COPY_TRACE).
# Needs root. Usage: bench/copy_ab.sh BIN_A BIN_B ROUNDS   (files under /var/tmp/ab)
set -u
A=$1; B=$2; N=$3
L=ab
D=/var/tmp/ab
mkdir -p $D
[ -f $D/src.bin ] || head -c 1073741824 /dev/urandom > $D/src.bin
$A lab down --name $L >/dev/null 2>&1
$A lab up --name $L --rtt ${RTT:-200ms} --loss 1% --rate 1G --seed 1 >/dev/null || exit 1
echo "the shared key of the copy A/B, for this bench" > $D/key
mkdir -p $D/dest
for side in A B; do
  bin=${!side}
  port=$([ $side = A ] && echo 5301 || echo 5302)
  $A lab exec --name $L server -- $bin --no-store serve -q -p $port --files $D/dest --key $D/key > $D/serve-$side.log 2>&1 &
  echo $! > $D/serve-$side.pid
done
sleep 2
steal() { awk '/^cpu /{print $9, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat; }
for i in $(seq 1 $N); do
  for side in A B; do
    bin=${!side}
    port=$([ $side = A ] && echo 5301 || echo 5302)
    # The copy before this one's writeback done and its file gone: each copy meets a
    # quiet disk, as a user's first copy does.
    rm -f $D/dest/*.bin; sync; sleep 1
    s0=$(steal)
    t0=$(date +%s.%N)
    LINERATE_COPY_TRACE=${TRACE:-} $A lab exec --name $L client -- $bin --no-store copy $D/src.bin 10.77.0.2:$side.bin -p $port --key $D/key -q --json --cold-start > $D/out-$side-$i.json 2> $D/trace-$side-$i.log
    t1=$(date +%s.%N)
    s1=$(steal)
    python3 - "$side" "$i" "$t0" "$t1" "$s0" "$s1" <<'PY'
import json,sys
side,i,t0,t1,s0,s1=sys.argv[1:]
d=json.load(open(f"/var/tmp/ab/out-{side}-{i}.json"))["copy"]
wall=float(t1)-float(t0)
a=[float(x) for x in s0.split()]; b=[float(x) for x in s1.split()]
st=(b[0]-a[0])/max(b[1]-a[1],1)*100
tr=d.get("start_estimate",{}) or {}
print(f"{side} {i}: {d['bytes']*8/wall/1e6:7.1f} Mbit/s wall {wall:6.2f} s, claim {d['goodput_bps']/1e6:7.1f}, resent {d['resent_bytes']/max(d['payload_bytes'],1)*100:.2f} %, steal {st:.1f} %, start {json.dumps(tr)}")
PY
  done
done
kill $(cat $D/serve-A.pid) $(cat $D/serve-B.pid) 2>/dev/null
sleep 1
$A lab down --name $L >/dev/null 2>&1
