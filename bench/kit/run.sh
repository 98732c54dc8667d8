#!/usr/bin/env bash
# linerate against the peers in this kit on loopback, interleaved round by round, each
# figure printed with the machine's CPU model and count; needs only bash, awk and lscpu.
# Made by bench/kit/pack.sh; the same tools, flags and truth as bench/peers.py and
# bench/crypto.py.
#
#   bash run.sh                  # 3 rounds of 3 s per test, about 3 minutes on 16 cores
#   ROUNDS=5 TIME=5 bash run.sh
#   TESTS="tcp1 tcp1-131072 quic8" bash run.sh   # tcpN-LENGTH: every tool writes LENGTH
#   COPY_ARGS=--null TESTS=copy1g bash run.sh     # extra flags for the copies
#
# Each line: test, tool, receiver goodput (what the tool claims; iperf2 and nuttcp count
# what their client wrote), truth (bytes `lo` counted over the client's wall time: every
# header and all control traffic included, so a little above the payload), CPU seconds
# both processes used per Gbit of truth. Medians per test and tool at the end, with the
# ratio of linerate to the best peer.
set -uo pipefail
KIT=$(cd "$(dirname "$0")" && pwd)
export LD_LIBRARY_PATH=$KIT/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PATH=$KIT/bin:$PATH
ROUNDS=${ROUNDS:-3}
TIME=${TIME:-3}
TESTS=${TESTS:-"tcp1 tcp1-131072 tcp8 tcp16 quic1 quic8 quic8-connections lab copy copylanes copy1g"}
CPU_MODEL=$(lscpu | awk -F: '/^Model name/ {sub(/^ +/, "", $2); print $2; exit}')
CPUS=$(nproc)
RESULTS=$(mktemp)

echo "== lscpu"
lscpu
echo "== uname: $(uname -r)   linerate: $(linerate --version 2>/dev/null)"

lo_bytes() { awk '/^ *lo:/ {sub(/^ *lo:/, ""); print $1; exit}' /proc/net/dev; }
now() { date +%s.%N; }
# user + system seconds of this shell's reaped children (`times` must run in this shell,
# not in a command substitution's subshell, whose children are its own).
CPU_FILE=$(mktemp)
trap 'rm -f "$RESULTS" "$CPU_FILE"' EXIT
children_cpu() {
    awk 'NR == 2 {
        total = 0
        for (i = 1; i <= 2; i++) { split($i, p, "m"); sub("s", "", p[2]); total += p[1] * 60 + p[2] }
        print total }' "$CPU_FILE"
}
port() { echo $((20000 + RANDOM % 20000)); }

# run_pair TEST TOOL PARSER SERVER... -- CLIENT...: the server in the background, the client
# in the foreground with `lo` read around it; both processes' CPU from their rusage once
# reaped.
run_pair() {
    local test=$1 tool=$2 parser=$3
    shift 3
    local server=() client=()
    while [[ $1 != -- ]]; do server+=("$1"); shift; done
    shift
    client=("$@")
    local cpu0 out rx0 rx1 t0 t1 claim cpu
    times > "$CPU_FILE"
    cpu0=$(children_cpu)
    "${server[@]}" > /dev/null 2>&1 &
    local spid=$!
    sleep 0.3
    rx0=$(lo_bytes); t0=$(now)
    out=$("${client[@]}" 2> /dev/null)
    t1=$(now); rx1=$(lo_bytes)
    kill "$spid" 2> /dev/null
    wait "$spid" 2> /dev/null
    times > "$CPU_FILE"
    cpu=$(awk -v a="$(children_cpu)" -v b="$cpu0" 'BEGIN {print a - b}')
    claim=$(printf '%s\n' "$out" | $parser)
    awk -v test="$test" -v tool="$tool" -v claim="${claim:-0}" -v rx0="$rx0" -v rx1="$rx1" \
        -v t0="$t0" -v t1="$t1" -v cpu="$cpu" -v model="$CPU_MODEL" -v cpus="$CPUS" 'BEGIN {
        truth = (rx1 - rx0) * 8 / (t1 - t0)
        per = truth > 0 ? cpu / (truth / 1e9 * (t1 - t0)) : 0
        printf "%-20s %-22s %8.2f Gbit/s  truth %8.2f  %.3f CPU s/Gbit  [%s, %s CPUs]\n",
            test, tool, claim / 1e9, truth / 1e9, per, model, cpus
    }' | tee -a "$RESULTS"
}

# Parsers: the receiver's bits a second, from each tool's own output.
linerate_bps() { grep -o '"receiver_bps": *[0-9.e+]*' | tail -1 | awk -F: '{print $2 + 0}'; }
iperf3_bps() { awk '/"sum_received"/ {found = 1} found && /"bits_per_second"/ {gsub(/[,]/, ""); print $2; exit}'; }
iperf2_bps() {
    awk -F, 'NF >= 9 { if ($6 == "-1") sum = $9; else if ($7 ~ /^0\.0-/) total += $9 }
        END { print (sum != "" ? sum : total) }'
}
qperf_bps() {
    awk '/bw *=/ { v = $3; u = $4; s = 1; if (u ~ /^K/) s = 1e3; if (u ~ /^M/) s = 1e6; if (u ~ /^G/) s = 1e9; print v * s * 8 }'
}
nuttcp_bps() { awk '{ for (i = 1; i < NF; i++) if ($(i + 1) == "Mbps") { print $i * 1e6; exit } }'; }
bulk_bps() {
    # quinn's bulk: "Transferred N bytes on 1 streams in 3.95s (455.37 MiB/s)".
    awk '/Overall download stats/ {found = 1}
        found && /^Transferred/ { secs = $8; sub(/s$/, "", secs); print $2 * 8 / secs; exit }'
}

lr() {
    local test=$1; shift
    local p; p=$(port)
    run_pair "$test" "linerate${LABEL:-}" linerate_bps linerate serve --listen 127.0.0.1 -p "$p" -q -- \
        linerate stream 127.0.0.1 -p "$p" -t "$TIME" --json --no-store "$@"
}
# peer TEST TOOL FLOWS [LENGTH]: a peer's run, with writes of LENGTH bytes where given
# (each tool's default otherwise).
peer() {
    local test=$1 tool=$2 flows=$3 length=${4:-} p
    p=$(port)
    command -v "$tool" > /dev/null || return 0
    local l=() m=() n=()
    if [[ -n $length ]]; then l=(-l "$length"); m=(-m "$length"); n=(-l"$length"); fi
    case $tool in
        iperf3) run_pair "$test" iperf3 iperf3_bps iperf3 -s -1 -p "$p" -- \
                    iperf3 -c 127.0.0.1 -p "$p" -P "$flows" -t "$TIME" "${l[@]}" -J ;;
        iperf) run_pair "$test" iperf2 iperf2_bps iperf -s -p "$p" -- \
                    iperf -c 127.0.0.1 -p "$p" -P "$flows" -t "$TIME" "${l[@]}" -y C ;;
        qperf) [[ $flows == 1 ]] && run_pair "$test" qperf qperf_bps qperf -lp "$p" -- \
                    qperf 127.0.0.1 -lp "$p" -t "$TIME" "${m[@]}" tcp_bw ;;
        nuttcp) run_pair "$test" nuttcp nuttcp_bps nuttcp -1 -P"$p" -p$((p + 1)) -- \
                    nuttcp -T"$TIME" "${n[@]}" -N"$flows" -P"$p" -p$((p + 1)) 127.0.0.1 ;;
    esac
}

# The emulator: 8 UDP flows of 1514-byte frames as fast as the client sends through a lab
# (to the server's IPv4 address: `server` resolves to IPv6 first, where 1472-byte
# datagrams leave as two fragments each)
# of 50 ms each way and 1 % loss, forwarded by THREADS threads a direction. Truth: the
# bytes the emulator passed toward the server (its status file) over the test's time.
# Needs root (network namespaces).
lab_threads() {
    local threads=$1 name="kit$1" out passed
    out=$(linerate --no-store lab run --name "$name" --threads "$threads" --delay 50ms --loss 1% -- \
        linerate --no-store stream 10.77.0.2 -u -b 0 -l 1472 -P 8 -t "$TIME" --json 2> /dev/null)
    passed=$(grep -o '"passed_bytes": *[0-9]*' "/run/linerate/lab/$name/status.json" 2> /dev/null |
        head -1 | awk -F: '{print $2 + 0}')
    rm -rf "/run/linerate/lab/$name"
    awk -v claim="$(printf '%s\n' "$out" | linerate_bps)" -v passed="${passed:-0}" -v t="$TIME" \
        -v tool="linerate ($threads threads)" -v model="$CPU_MODEL" -v cpus="$CPUS" 'BEGIN {
        printf "%-20s %-22s %8.2f Gbit/s  truth %8.2f  %s CPU s/Gbit  [%s, %s CPUs]\n",
            "lab-udp8", tool, claim / 1e9, passed * 8 / t / 1e9, "-", model, cpus
    }' | tee -a "$RESULTS"
}

# copy_pair TEST SIZE LAB-ARGS...: in one lab (a server serving a scratch directory), a
# SIZE file (sparse: the reads cost little, the hashing and the writes are real) copied to
# the server's disk twice: "cold" searches the path's rate from scratch (--cold-start),
# "resumed" begins from what the cold copy just found (the client's path memory, in a
# scratch XDG_STATE_HOME). Truth: the bytes the emulator passed toward the server over the
# copy's own time. Each line gives the copy's diagnosis and where its time went. Needs
# root.
copy_pair() {
    local test=$1 size=$2 name="kit$RANDOM" scratch
    shift 2
    scratch=$(mktemp -d)
    truncate -s "$size" "$scratch/source.bin"
    mkdir "$scratch/in"
    echo "the bench kit's shared key, 32+ bytes" > "$scratch/key"
    linerate --no-store lab up --name "$name" "$@" > /dev/null 2>&1 || { echo "lab up failed" >&2; return; }
    linerate --no-store lab exec --name "$name" server -- \
        linerate --no-store serve -q --files "$scratch/in" --key "$scratch/key" > /dev/null 2>&1 &
    local serve=$!
    sleep 1
    local mode out passed0 passed1 goodput seconds
    for mode in cold resumed; do
        passed0=$(lab_passed "$name")
        out=$(XDG_STATE_HOME=$scratch/state linerate --no-store lab exec --name "$name" client -- \
            linerate --no-store copy "$scratch/source.bin" server:copy.bin --key "$scratch/key" -q --json \
            $([[ $mode == cold ]] && echo --cold-start) ${COPY_ARGS:-} 2> "$scratch/stderr")
        # The emulator writes its status every second.
        sleep 1.2
        passed1=$(lab_passed "$name")
        goodput=$(printf '%s\n' "$out" | grep -o '"goodput_bps": *[0-9.e+]*' | head -1 | awk -F: '{print $2 + 0}')
        seconds=$(printf '%s\n' "$out" | grep -o '"wall_s": *[0-9.e+]*' | head -1 | awk -F: '{print $2 + 0}')
        [[ -z $goodput ]] && tail -3 "$scratch/stderr" >&2
        awk -v claim="${goodput:-0}" -v passed="$(( ${passed1:-0} - ${passed0:-0} ))" -v t="${seconds:-0}" \
            -v test="$test" -v tool="linerate ($mode)" -v model="$CPU_MODEL" -v cpus="$CPUS" 'BEGIN {
            printf "%-20s %-22s %8.3f Gbit/s  truth %8.3f  %s CPU s/Gbit  [%s, %s CPUs]\n",
                test, tool, claim / 1e9, (t > 0 ? passed * 8 / t / 1e9 : 0), "-", model, cpus
        }' | tee -a "$RESULTS"
        printf '%s\n' "$out" | tr -d '\n' | tr -s ' ' |
            grep -o '"limit": *"[^"]*"\|"cpu_s": *{[^}]*}\|"disk_busy_s": *{[^}]*}\|"diagnosis": *"[^"]*"\|"time_split_s": *{[^}]*}\|"resumed_from_bps": *[0-9.e+]*\|"resent_bytes": *[0-9]*\|"payload_bytes": *[0-9]*' |
            sed 's/^/    /'
    done
    kill "$serve" 2> /dev/null
    wait "$serve" 2> /dev/null
    linerate --no-store lab down --name "$name" > /dev/null 2>&1
    rm -rf "$scratch"
}
lab_passed() {
    grep -o '"passed_bytes": *[0-9]*' "/run/linerate/lab/$1/status.json" 2> /dev/null |
        head -1 | awk -F: '{printf "%.0f\n", $2}'
}

one_round() {
    for test in $TESTS; do
        case $test in
            tcp*-*)
                # tcpN-LENGTH: every tool writes LENGTH bytes at a time.
                local flows=${test#tcp} length
                length=${flows#*-}; flows=${flows%-*}
                lr "$test" -P "$flows" -l "$length"
                for tool in iperf3 iperf qperf nuttcp; do peer "$test" "$tool" "$flows" "$length"; done ;;
            tcp*)
                local flows=${test#tcp}
                lr "$test" -P "$flows"
                for tool in iperf3 iperf qperf nuttcp; do peer "$test" "$tool" "$flows"; done ;;
            quic1)
                lr quic1 --quic
                if command -v bulk > /dev/null; then
                    # quinn's own benchmark: one client, one stream, a download sized to
                    # take about TIME seconds at 5 Gbit/s, with AES-128-GCM (its only
                    # AES suite that works: QUIC's initial packets need AES-128), so
                    # linerate runs that cipher beside it too.
                    LABEL=" (aes128-gcm)" lr quic1 --quic --cipher aes128-gcm
                    run_pair quic1 "quinn bulk" bulk_bps true -- \
                        bulk --download-size "$((TIME * 600))M"
                fi ;;
            lab)
                if [[ $(id -u) == 0 ]]; then
                    for threads in $(printf '%s\n' 1 $(( CPUS / 4 > 1 ? CPUS / 4 : 2 )) $(( CPUS / 2 > 2 ? CPUS / 2 : 2 )) | sort -un); do
                        lab_threads "$threads"
                    done
                fi ;;
            copy)
                # 200 ms round trip, 1 % loss, no bottleneck: what the emulator's threads
                # carry (one flow keeps to one thread).
                if [[ $(id -u) == 0 ]]; then
                    copy_pair copy-200ms-1% "${COPY_SIZE:-4G}" --delay 100ms --loss 1% --buffers 256M \
                        --threads "$(( CPUS / 4 > 1 ? CPUS / 4 : 1 ))"
                fi ;;
            copylanes)
                # The same path with the copy over lanes (a UDP flow and a sending thread
                # each): as many as the emulator has threads, and twice that.
                if [[ $(id -u) == 0 ]]; then
                    local threads=$(( CPUS / 4 > 1 ? CPUS / 4 : 1 )) lanes
                    for lanes in $(printf '%s\n' "$(( threads > 1 ? threads : 2 ))" "$(( threads * 2 > 2 ? threads * 2 : 4 ))" | sort -un); do
                        COPY_ARGS="${COPY_ARGS:-} --lanes $lanes" copy_pair "copy-200ms-1%-lanes$lanes" \
                            "${COPY_SIZE:-4G}" --delay 100ms --loss 1% --buffers 256M --threads "$threads"
                    done
                fi ;;
            copy1g)
                # The issue's 1 Gbit/s path: 100 ms, 1 % loss, 1 GiB; the protocol's own
                # bound there is 894.9 Mbit/s (docs/performance.md), 95 % of it 850.
                if [[ $(id -u) == 0 ]]; then
                    copy_pair copy-1g-100ms-1% 1G --rtt 100ms --loss 1% --rate 1G --buffers 64M
                fi ;;
            quic*-connections)
                local flows=${test#quic}; flows=${flows%-connections}
                lr "$test" --quic -P "$flows" --connections ;;
            quic*)
                local flows=${test#quic}
                LABEL=" (workers)" lr "$test" --quic -P "$flows"
                # One QUIC worker a side: every flow on one thread, as before workers.
                LABEL=" (1 worker)" lr "$test" --quic -P "$flows" --threads 1 ;;
        esac
    done
}

for round in $(seq 1 "$ROUNDS"); do
    echo "== round $round of $ROUNDS"
    one_round
done

echo "== medians of $ROUNDS rounds, $TIME s each  [$CPU_MODEL, $CPUS CPUs, $(uname -r)]"
awk '{
    split($0, parts, /  +/)
    key = parts[1] "|" parts[2]
    n[key]++; v[key, n[key]] = $0
}
{
    match($0, /[0-9.]+ Gbit\/s/); g = substr($0, RSTART, RLENGTH - 7) + 0
    test = substr($0, 1, 20); tool = substr($0, 22, 22)
    sub(/ +$/, "", test); sub(/ +$/, "", tool)
    k = test SUBSEP tool
    count[k]++; vals[k, count[k]] = g
    if (!(k in seen)) { seen[k] = 1; order[++keys] = k }
}
END {
    for (i = 1; i <= keys; i++) {
        k = order[i]; c = count[k]
        for (a = 1; a <= c; a++) x[a] = vals[k, a]
        for (a = 1; a <= c; a++) for (b = a + 1; b <= c; b++) if (x[b] < x[a]) { t = x[a]; x[a] = x[b]; x[b] = t }
        med = c % 2 ? x[(c + 1) / 2] : (x[c / 2] + x[c / 2 + 1]) / 2
        split(k, kt, SUBSEP)
        median[k] = med
        printf "%-20s %-22s %8.2f Gbit/s\n", kt[1], kt[2], med
    }
    print "== linerate against the best peer (median goodput)"
    for (i = 1; i <= keys; i++) {
        k = order[i]; split(k, kt, SUBSEP)
        if (kt[2] !~ /^linerate/) continue
        best = 0; name = ""
        for (j = 1; j <= keys; j++) {
            m = order[j]; split(m, mt, SUBSEP)
            if (mt[1] == kt[1] && mt[2] !~ /^linerate/ && median[m] > best) { best = median[m]; name = mt[2] }
        }
        if (best > 0) printf "%-20s %-22s %.2fx %s\n", kt[1], kt[2], median[k] / best, name
    }
    print "== QUIC flows against one flow (median goodput; the target for 8 flows on 16 cores: 6x)"
    one = median["quic1" SUBSEP "linerate"]
    for (i = 1; i <= keys; i++) {
        k = order[i]; split(k, kt, SUBSEP)
        if (kt[1] ~ /^quic/ && kt[1] != "quic1" && kt[2] ~ /^linerate/ && one > 0)
            printf "%-20s %-22s %.2fx quic1\n", kt[1], kt[2], median[k] / one
    }
}' "$RESULTS"
